"""SCRAM users for tests of SASL listeners, written into a data dir before its
daemon starts, through the daemon's own node and the core's user store.

A stand-in until `linkd --sasl-users FILE` lands; then tests pass that option
instead and this module goes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

from linkd.core.users import MIN_ITERATIONS, SCRAM_MECHANISMS
from linkd.node import ClusterNode


async def _seed(data_dir: Path, cluster_id: str, users: Mapping[str, str]) -> None:
    node = ClusterNode(data_dir, cluster_id)
    node.open()
    try:
        for name, password in users.items():
            salts = {m: os.urandom(32) for m in SCRAM_MECHANISMS}
            await node.execute(
                node.state.set_user_password(name, password, salts, MIN_ITERATIONS)
            )
    finally:
        await node.stop()


def seed_users(data_dir: Path, cluster_id: str, users: Mapping[str, str]) -> None:
    """Gives each user its password (SCRAM-SHA-256 and -512) in the data dir."""
    data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(_seed(data_dir, cluster_id, users))
