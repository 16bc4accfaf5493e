"""The quiet fold (`links.QuietFold`): a fetch session's quiet partitions are
counted instead of written round after round. Whatever sequence of rounds,
refusals and reads, every row read through `LinkRuntime.partitions` is the
row `on_leader_fetch`, one fetch at a time, would have written, field for
field, and the lag judgement says the same."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import FetchedAgain, LinkLimits, LinkTable, Mapping

NOW = 1_700_000_000_000
LIMITS = LinkLimits(session_timeout_ms=5_000, lag_max_records=0, lag_max_ms=3_000,
                    fetch_silence_ms=2_000)  # fmt: skip
PARTITIONS = 2


@dataclass
class Log:
    log_end_offset: int
    high_watermark: int
    log_start_offset: int = 0


def _table() -> LinkTable:
    table = LinkTable("A", LIMITS)
    config = table.new_config("ab", "id", "B", "b:1", "", "local_dials", "", NOW)
    table.store(config, NOW)
    table.put_mapping("ab", Mapping("topic", "t", "t", "local", True, (0, 0, "")), NOW)
    table.on_contact("ab", NOW)
    table.register_led_partitions("ab", {("t", p) for p in range(PARTITIONS)}, NOW)
    return table


# One step: (kind, partitions it names, time step, log growth)
step = st.tuples(
    st.sampled_from(["again", "again", "again", "answered", "caught_up", "refused", "read",
                     "grow", "tick"]),
    st.sets(st.integers(0, PARTITIONS - 1)),
    st.integers(0, 1_500),
    st.integers(0, 3),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(step, max_size=40))
# Rows the fold holds at the log end, at the HW below it and below the HW,
# each read after rounds it missed.
@example([("caught_up", {0}, 1, 0), ("again", {0, 1}, 1, 0), ("again", {0}, 1, 0),
          ("again", {0}, 1, 0), ("read", set(), 0, 0)])
@example([("grow", {0}, 0, 1), ("answered", {0}, 1, 0), ("again", {0}, 1, 0),
          ("again", {0}, 1, 0), ("tick", set(), 5, 0), ("again", {0}, 1, 0)])
@example([("grow", {0}, 0, 3), ("answered", {0}, 1, 0), ("again", {0}, 1, 0),
          ("again", {0}, 1, 0), ("again", {0}, 2_000, 0), ("read", set(), 0, 0)])
def test_the_fold_reads_as_the_rows_written_one_by_one(steps: list[tuple[str, set[int], int,
                                                                         int]]) -> None:
    """As a fetch session drives the table: a partition is fetched again
    unanswered (quiet: at its log end; spare: behind) only while its log and
    its fetch are as its last answer found them; a log that grows, or a
    follower that moves, is answered first."""
    folded, plain = _table(), _table()
    logs = [Log(5, 5) for _ in range(PARTITIONS)]
    positions = [5] * PARTITIONS  # each follower's fetch offset
    changed = [True] * PARTITIONS  # not answered since its log or fetch changed
    now = NOW

    def topic_logs(_topic: str) -> list[Log]:
        return logs

    for kind, parts, dt, grow in steps:
        now += dt
        chosen = sorted(parts)
        if kind == "again":
            again = [("t", p, positions[p]) for p in chosen if not changed[p]]
            folded.on_fetched_again("ab", FetchedAgain.listed(again), topic_logs, now)
            for topic, p, offset in again:  # the reference: one fetch at a time
                plain.on_leader_fetch("ab", topic, p, offset, logs[p].log_end_offset,
                                      logs[p].high_watermark, now)  # fmt: skip
            plain.tick(now)  # (a serve judges the link once its fetches are recorded)
        elif kind in ("answered", "caught_up"):
            for p in chosen:
                if kind == "caught_up":
                    positions[p] = logs[p].log_end_offset
                changed[p] = False
                for table in (folded, plain):
                    table.on_leader_fetch("ab", "t", p, positions[p], logs[p].log_end_offset,
                                          logs[p].high_watermark, now)  # fmt: skip
        elif kind == "refused":
            why = ClusterError(ErrorCode.DIVERGED_LOG, "t", "held")
            for p in chosen:
                changed[p] = True
                for table in (folded, plain):
                    table.on_leader_refused("ab", "t", p, why, now)
        elif kind == "grow":
            for p in chosen:
                before = (logs[p].log_end_offset, logs[p].high_watermark)
                logs[p].log_end_offset += grow
                logs[p].high_watermark = logs[p].log_end_offset - (grow % 2)
                # (a log whose bounds moved is answered, not fetched again)
                changed[p] = changed[p] or before != (logs[p].log_end_offset,
                                                      logs[p].high_watermark)
        elif kind == "tick":
            for table in (folded, plain):
                table.tick(now)
        assert folded.state_name("ab") == plain.state_name("ab")
        if kind == "read":
            assert _rows(folded) == _rows(plain)
    assert _rows(folded) == _rows(plain)
    assert not folded.runtime["ab"].fold.rows  # a read through `partitions` empties it


def _rows(table: LinkTable) -> dict[object, object]:
    return {
        k: tuple(getattr(v, f.name) for f in dataclasses.fields(v))
        for k, v in table.runtime["ab"].partitions.items()
    }


def test_quiet_rounds_are_counted__not_written() -> None:
    table = _table()
    table.check_lag_verdicts = True  # (its check reads settled copies: it writes nothing)
    logs = [Log(5, 5) for _ in range(PARTITIONS)]
    quiet = [("t", p, 5) for p in range(PARTITIONS)]
    table.on_fetched_again("ab", FetchedAgain.listed(quiet), lambda _t: logs, NOW + 1)  # join
    fold = table.runtime["ab"].fold
    assert len(fold.rows) == PARTITIONS
    row = table.runtime["ab"].rows[("t", 0, "leader")]
    for i in range(2, 12):
        table.on_fetched_again("ab", FetchedAgain.listed(quiet), lambda _t: logs, NOW + i)
    assert row.last_fetch_ms == NOW + 1 and fold.count == 10  # not written
    assert table.runtime["ab"].partitions[("t", 0, "leader")].last_fetch_ms == NOW + 11
    assert row.fetches == 11 and not fold.rows


def test_a_reader_of_every_row_settles_the_fold_in_place() -> None:
    """A reader that changes no row (a lag scan) settles the fold's rows and
    leaves them in it: the next round counts them again, joining none."""
    table = _table()
    logs = [Log(5, 5) for _ in range(PARTITIONS)]
    quiet = [("t", p, 5) for p in range(PARTITIONS)]
    for i in range(1, 12):
        table.on_fetched_again("ab", FetchedAgain.listed(quiet), lambda _t: logs, NOW + i)
    runtime = table.runtime["ab"]
    row = runtime.rows[("t", 0, "leader")]
    assert row.last_fetch_ms == NOW + 1
    assert runtime.settled()[("t", 0, "leader")].last_fetch_ms == NOW + 11
    assert len(runtime.fold.rows) == PARTITIONS and row.fetches == 11  # still in the fold
    table.on_fetched_again("ab", FetchedAgain.listed(quiet), lambda _t: logs, NOW + 12)
    assert row.last_fetch_ms == NOW + 11  # counted, not written
    assert runtime.partitions[("t", 0, "leader")].last_fetch_ms == NOW + 12
    assert row.fetches == 12 and not runtime.fold.rows
