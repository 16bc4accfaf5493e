"""Dynamic broker configs on the daemon's node: journalled, so a restart
keeps them, and taking effect where they have one (the log cleaner's
backoff; every topic's server defaults). No daemon is started."""

from __future__ import annotations

import asyncio
from pathlib import Path

from linkd.log_cleaner import CleanerSettings
from linkd.node import ClusterNode


def test_a_dynamic_broker_config_takes_effect_at_once_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    async def story() -> None:
        settings = CleanerSettings(backoff_ms=15_000)
        node = ClusterNode(tmp_path, "c", fsync=False, cleaner_settings=settings)
        node.open()
        await node.start()
        await node.create_topic("t", 1, {})
        await node.alter_broker_configs("0", {"log.cleaner.backoff.ms": "200"}, [])
        await node.alter_broker_configs("", {"log.retention.hours": "2"}, [])
        assert node.cleaner.settings.backoff_ms == 200
        assert node.state.topic("t").config.retention_ms == 7_200_000
        await node.stop()

        again = ClusterNode(tmp_path, "c", fsync=False, cleaner_settings=settings)
        again.open()
        await again.start()
        assert again.cleaner.settings.backoff_ms == 200
        assert again.state.topic("t").config.retention_ms == 7_200_000
        await again.alter_broker_configs("0", {}, ["log.cleaner.backoff.ms"])
        assert again.cleaner.settings.backoff_ms == 15_000  # the daemon's option again
        await again.stop()

    asyncio.run(story())
