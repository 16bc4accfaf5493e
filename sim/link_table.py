"""A LinkTable that can defer its state recomputation to the end of a round.

Why: `LinkTable.on_progress` recomputes the link state over every partition
on each call, so one fetch round over P partitions costs O(P^2); with the
catch-up storm's 5,000 partitions that is 25 million steps per round. The
daemon calls it the same way (linkd/replication.py: apply_fetched,
serve_fetch). This subclass changes no rule: inside `deferred()` the calls to
the core's own `_recompute` are collected and run once per link, at the same
`now_ms`, when the block ends. The lead may move a batched `on_progress_many`
into the core; then this module goes away.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from linkd.core.links import LinkLimits, LinkTable


class DeferringLinkTable(LinkTable):
    def __init__(self, cluster_id: str, limits: LinkLimits | None = None) -> None:
        super().__init__(cluster_id, limits)
        self._deferred: dict[str, int] | None = None

    def _recompute(self, name: str, now_ms: int) -> None:
        if self._deferred is not None:
            self._deferred[name] = now_ms
            return
        super()._recompute(name, now_ms)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        if self._deferred is not None:  # nested: the outer block flushes
            yield
            return
        self._deferred = {}
        try:
            yield
        finally:
            pending, self._deferred = self._deferred, None
            for name, now_ms in sorted(pending.items()):
                if name in self.runtime:
                    super()._recompute(name, now_ms)
