"""`links._fetched_again` (a run of repeated fetches judged by columns) must
leave every row exactly as `links._leader_fetched` (one fetch at a time)
leaves it: the same rule, written twice for speed. Seeded rows, some
repeats of their last fetch and some not, through both."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

from linkd.core import links
from linkd.core.links import PartitionProgress


@dataclass
class _Log:
    log_end_offset: int
    high_watermark: int


def _rows(rng: random.Random, n: int) -> tuple[dict[tuple[str, int, str], PartitionProgress],
                                              list[tuple[str, int, int]], list[_Log]]:  # fmt: skip
    rows: dict[tuple[str, int, str], PartitionProgress] = {}
    fetches: list[tuple[str, int, int]] = []
    logs: list[_Log] = []
    for p in range(n):
        end = rng.randint(0, 20)
        hw = rng.randint(0, end)
        offset = rng.randint(0, end)
        logs.append(_Log(end, hw))
        fetches.append(("t", p, offset))
        if rng.random() < 0.1:
            continue  # no row yet
        row = PartitionProgress("t", p, "leader", caught_up_at_ms=rng.randint(0, 50))
        repeat = rng.random() < 0.7
        row.leo_at_last_fetch = end if repeat else rng.randint(0, 20)
        row.hw_at_last_fetch = hw if repeat else rng.randint(0, 20)
        row.log_end_offset = offset if repeat else rng.randint(0, 20)
        row.source_high_watermark = hw if repeat else rng.randint(0, 20)
        row.caught_up_at_fetch = offset >= hw if repeat else rng.random() < 0.5
        row.fetches = rng.randint(0, 3)
        row.last_fetch_ms = rng.randint(0, 50)
        row.fetched_caught_up_ms = rng.randint(-1, 60)
        row.hw_caught_up_ms = rng.randint(0, 50)
        rows[("t", p, "leader")] = row
    return rows, fetches, logs


def test_a_run_of_repeated_fetches_leaves_every_row_as_one_fetch_at_a_time_does() -> None:
    rng = random.Random(32)
    for _ in range(200):
        rows, fetches, logs = _rows(rng, rng.randint(1, 12))
        by_columns = copy.deepcopy(rows)
        assert links._fetched_again(by_columns, "t", fetches, logs, 100)
        one_by_one = copy.deepcopy(rows)
        for topic, p, offset in fetches:
            links._leader_fetched(
                one_by_one, topic, p, offset, logs[p].log_end_offset, logs[p].high_watermark, 100
            )
        assert by_columns == one_by_one
