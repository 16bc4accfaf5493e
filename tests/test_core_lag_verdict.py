"""A link's lag verdict (`linkd.core.link_lag`) answers as a scan of every
partition would, through every way the link table changes its rows: seeded
runs of random calls (progress, fetches one at a time and a run at once,
refusals, led partitions registered and forgotten, rows forgotten), with the
led logs growing under the rows and time moving on (and once back). Each
judgement is checked against a scan (`LinkTable.check_lag_verdicts`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from linkd.core import link_lag
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkLimits, LinkRuntime, LinkTable

TOPICS = ("t0", "t1")
PARTITIONS = 4


@dataclass
class Log:
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0


def _table(rng: random.Random) -> tuple[LinkTable, dict[str, list[Log]]]:
    table = LinkTable(
        "A",
        LinkLimits(
            session_timeout_ms=10**9,
            lag_max_records=rng.choice([0, 0, 2]),
            lag_max_ms=rng.choice([5, 30]),
            fetch_silence_ms=rng.choice([3, 20]),
        ),
    )
    logs = {t: [Log() for _ in range(PARTITIONS)] for t in TOPICS}
    table.led_logs = logs.get
    table.runtime["l"] = LinkRuntime()
    return table, logs


def _step(rng: random.Random, table: LinkTable, logs: dict[str, list[Log]], now: int) -> None:
    runtime = table.runtime["l"]
    topic, partition = rng.choice(TOPICS), rng.randrange(PARTITIONS)
    log = logs[topic][partition]
    kind = rng.randrange(8)
    if kind == 0:  # a produce on a led log
        log.log_end_offset += rng.randrange(1, 4)
        if rng.random() < 0.7:
            log.high_watermark = log.log_end_offset
    elif kind == 1:
        source_hw = rng.randrange(0, 12)
        position = min(source_hw, rng.randrange(0, 12))
        table.on_progress("l", topic, partition, "follower", position, source_hw, now)
    elif kind == 2:
        offset = rng.choice([log.log_end_offset, log.high_watermark, rng.randrange(0, 12)])
        table.on_leader_fetch(
            "l", topic, partition, offset, log.log_end_offset, log.high_watermark, now
        )
    elif kind == 3:  # a round: every led row of a topic fetched, most where they were
        rows = [
            (topic, p, row.log_end_offset if rng.random() < 0.8 else logs[topic][p].high_watermark)
            for p in range(PARTITIONS)
            if (row := runtime.partitions.get((topic, p, "leader"))) is not None
        ]
        table.on_leader_fetches("l", rows, logs.__getitem__, now)
    elif kind == 4:
        table.on_leader_refused(
            "l", topic, partition, ClusterError(ErrorCode.NOT_LED_ON_LINK, topic, "not led"), now
        )
    elif kind == 5:
        led = {(t, p) for t in TOPICS for p in range(PARTITIONS) if rng.random() < 0.6}
        table.register_led_partitions("l", led, now)
    elif kind == 6:
        keep = {k for k in runtime.partitions if rng.random() < 0.8}
        table.forget_partitions("l", keep)
        table.on_contact("l", now)
    else:
        table.on_contact("l", now)


@pytest.mark.parametrize("seed", range(60))
def test_a_verdict_answers_as_a_scan_of_every_partition(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LinkTable, "check_lag_verdicts", True)
    answered = 0
    real = link_lag.LagVerdict.lagging

    def counted(self: link_lag.LagVerdict, *args: object, **kw: object) -> bool | None:
        nonlocal answered
        said = real(self, *args, **kw)  # type: ignore[arg-type]
        answered += said is not None
        return said

    monkeypatch.setattr(link_lag.LagVerdict, "lagging", counted)
    rng = random.Random(seed)
    table, logs = _table(rng)
    now = 0
    for i in range(400):
        now += rng.choice([0, 0, 1, 1, 2, 7])
        if i == 200:
            now -= 3  # the clock went back: the verdict is dropped, not trusted
        _step(rng, table, logs, now)
        table.on_contact("l", now)  # judged (checked against a scan)
    assert answered > 10  # the verdict answered, not only the scans


def test_a_led_row_whose_follower_is_behind_is_watched_as_its_log_grows() -> None:
    """A led row behind with nothing to copy is watched: the log growing
    under it, with no change to the row, makes the link lag at once."""
    table = LinkTable("A", LinkLimits(session_timeout_ms=10**9, fetch_silence_ms=5))
    log = Log()
    table.led_logs = {"t0": [log]}.get
    table.runtime["l"] = LinkRuntime()
    table.on_leader_fetch("l", "t0", 0, 0, 0, 0, 10)  # caught up
    table.on_contact("l", 12)
    assert table.state_name("l") == "FOLLOWING"
    verdict = table.runtime["l"].lag_verdict
    assert verdict is not None and not verdict.watch
    table.on_contact("l", 20)  # silent now: behind, nothing to copy yet
    assert table.state_name("l") == "FOLLOWING"
    verdict = table.runtime["l"].lag_verdict
    assert verdict is not None and set(verdict.watch) == {("t0", 0, "leader")}
    log.log_end_offset = log.high_watermark = 3
    table.on_contact("l", 21)
    assert table.state_name("l") == "CATCHING_UP"
