"""MirrorMaker 2's internal topics: offset syncs, checkpoints, heartbeats, and the
source offsets of exactly-once flows.

Rules:
- Each is created with one partition and `cleanup.policy=compact`, as MM2 does:
  their readers only need the newest record per key.
  linkd compacts them (its log cleaner, `linkd/core/cleaner.py`).
- A cluster that refuses compaction is an expected case, not a failure: the
  topic is created with the cluster's default cleanup policy and retention
  instead, and this is said once per cluster and run, calmly, not once per
  topic. Records older than the retention are then deleted rather than
  compacted away.
- A refused replication factor (single-broker clusters and MM2's default of 3)
  is reported and the topic is created with the cluster's default factor.
- Any other refusal is the caller's error. At most three attempts per topic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mirror.admin_ops import ClusterAdmin, CompactionRefused, MirrorClientError

__all__ = ["COMPACTED", "CompactionNotices", "create_internal_topic"]

COMPACTED = {"cleanup.policy": "compact"}
# The broker's default replication factor (CreateTopics' -1).
DEFAULT_REPLICATION_FACTOR = -1
MAX_ATTEMPTS = 3


class CompactionNotices:
    """Says once per cluster that it does not compact, and what the mirror does instead."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.told: set[str] = set()
        self._lock = threading.Lock()  # heartbeat tasks start beside the flows

    def refused(self, alias: str) -> None:
        with self._lock:
            if alias in self.told:
                return
            self.told.add(alias)
        self.report(
            f"cluster {alias} does not support compacted topics: MirrorMaker 2's internal "
            f"topics on {alias} use its default cleanup policy and retention instead of "
            "cleanup.policy=compact (records older than the retention are deleted, not "
            "compacted)"
        )


def create_internal_topic(
    admin: ClusterAdmin,
    name: str,
    replication_factor: int,
    *,
    notices: CompactionNotices,
    report: Callable[[str], None],
) -> bool:
    """Creates `name` (one partition) on `admin`'s cluster; True when created,
    False when it already existed."""
    configs: dict[str, str] = dict(COMPACTED)
    factor = replication_factor
    for _ in range(MAX_ATTEMPTS):
        try:
            return admin.create_topic(name, 1, factor, configs)
        except CompactionRefused:
            notices.refused(admin.alias)
            configs = {}
        except MirrorClientError as exc:
            if factor == DEFAULT_REPLICATION_FACTOR:
                raise
            report(f"{exc}; creating {name} with the cluster's default replication factor")
            factor = DEFAULT_REPLICATION_FACTOR
    raise MirrorClientError(f"cluster {admin.alias}: could not create {name}")
