"""Fetch sessions (linkd/core/fetch_sessions.py): after a full round a
follower names only the partitions whose fetch changed, and the source
answers the others only when they have news. Told between two clusters held
in memory, as in tests/test_core_link_rounds.py: A leads orders-, B follows.

The source side runs through `link_driver.hold_fetch`, the function both
shells call, with no wait (the answer is returned at once).
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import replace

import pytest

from linkd.core import fetch_sessions as fs
from linkd.core import link_admin as admin
from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.errors import ErrorCode
from linkd.core.links import FetchedAgain
from linkd.core.log_feed import LogFeed
from linkd.core.partition import PartitionLog
from linkd.core.requests import Now, WakeWaiters
from tests.test_core_link_rounds import NOW, Disk, discover, produce, two_clusters

SETTINGS = driver.DriverSettings(max_wait_ms=0)


def _serve(a: ClusterState, disk_a: Disk, request: rounds.FetchRequest, now: int,
           max_bytes: int = 0) -> rounds.FetchAnswer:  # fmt: skip
    """The source's side of one fetch, as a shell pumps it (no wait)."""
    holding: Generator[object, object, rounds.FetchAnswer] = driver.hold_fetch(
        a, request.link_id, request.partitions, 0, max_bytes, disk_a.read, SETTINGS,
        from_remote=True, fetch_session=request.fetch_session,
    )  # fmt: skip
    reply: object = None
    try:
        while True:
            asked = holding.send(reply)
            assert isinstance(asked, Now | WakeWaiters), asked
            reply = now if isinstance(asked, Now) else None
    except StopIteration as done:
        answer: rounds.FetchAnswer = done.value
        return answer


class Round:
    """One pull round, with or without a fetch session on the follower."""

    def __init__(self, sessions: bool = True, max_bytes: int = 0) -> None:
        self.a, self.b, self.disk_a, self.disk_b = two_clusters()
        self.follower = fs.FollowerFetchSession() if sessions else None
        self.max_bytes = max_bytes

    def request(self) -> rounds.FetchRequest:
        full = rounds.follower_fetch_request(self.b, self.b.links.get("ab"), 1 << 20)
        return self.follower.request(full) if self.follower is not None else full

    def run(
        self, now: int
    ) -> tuple[rounds.FetchRequest, rounds.FetchAnswer, rounds.FetchAnswer | None]:
        """(what was sent, what the source answered, what the follower applied)."""
        request = self.request()
        answer = _serve(self.a, self.disk_a, request, now, self.max_bytes)
        whole = answer if self.follower is None else self.follower.answered(request, answer)
        if whole is not None:
            applied = rounds.apply_replica_fetch(self.b, "ab", whole, request.local_of, now)
            self.disk_b.carry_out(self.b, applied.effects)
            rounds.finish_fetch_round(
                self.b, "ab", applied.progress, whole.sync_state, now,
                refused=applied.refused, unchanged=applied.unchanged,
            )
        return request, answer, whole


def _keys(parts: object) -> list[tuple[str, int]]:
    assert isinstance(parts, tuple | list)
    return sorted((p.source_topic, p.partition) for p in parts)


def _three_partitions(sessions: bool = True, max_bytes: int = 0) -> Round:
    r = Round(sessions, max_bytes)
    r.a.create_topic("orders-2", 3, {}, "src-2")
    discover(r.a, r.b, r.disk_b)
    return r


ALL = [("orders-1", 0), ("orders-2", 0), ("orders-2", 1), ("orders-2", 2)]


def test_after_a_full_round__a_request_names_only_what_moved__quiet_ones_stay_reached() -> None:
    r = _three_partitions()
    produce(r.a, r.disk_a, 3, "orders-2")

    sent, answer, _ = r.run(NOW + 10)
    assert sent.fetch_session.epoch == rounds.OPENING and _keys(sent.partitions) == ALL
    assert answer.fetch_session_id == 1 and _keys(answer.partitions) == ALL

    # B copied orders-2/0: only its position changed.
    sent, answer, whole = r.run(NOW + 20)
    assert sent.fetch_session == rounds.FetchSessionRef(1, 1)
    assert _keys(sent.partitions) == [("orders-2", 0)]
    assert _keys(answer.partitions) == [("orders-2", 0)]  # the others have no news
    assert whole is not None and _keys(whole.partitions) == [("orders-2", 0)]
    assert sorted(whole.unchanged.hw) == [("orders-1", 0), ("orders-2", 1), ("orders-2", 2)]

    # Nothing moved anywhere: nothing named, nothing answered, all reached.
    sent, answer, whole = r.run(NOW + 30)
    assert sent.partitions == () and answer.partitions == []
    assert whole is not None and whole.partitions == [] and sorted(whole.unchanged.hw) == ALL
    assert whole.unchanged.hw[("orders-2", 0)] == 3
    runtime = r.b.links.runtime["ab"]
    assert sorted((t, p) for t, p, _role in runtime.partitions) == ALL
    assert r.b.link_state("ab") == "FOLLOWING"
    # The source still counts each quiet partition as fetched at its position.
    led = r.a.links.runtime["ab"].partitions[("orders-2", 1, "leader")]
    assert led.last_fetch_ms == NOW + 30


def test_news_on_a_partition_not_named__is_answered() -> None:
    r = _three_partitions()
    produce(r.a, r.disk_a, 2, "orders-2")
    for t in (10, 20, 30):
        r.run(NOW + t)

    # New records, unnamed (B's position there did not change): answered.
    produce(r.a, r.disk_a, 4, "orders-1")
    sent, answer, _ = r.run(NOW + 40)
    assert sent.partitions == () and _keys(answer.partitions) == [("orders-1", 0)]
    assert answer.partitions[0].records
    assert r.b.partition("orders-1", 0).log_end_offset == 4

    # Its log rewritten to the same end, epoch and high watermark: the log is
    # not the one last answered (`PartitionLog.rewrites`), so it is served,
    # and B's last batch is no longer there.
    r.run(NOW + 50)  # B's new position
    log = r.a.partition("orders-2", 0)
    log.truncate_to(0)
    r.disk_a.batches[("src-2", 0)] = []
    produce(r.a, r.disk_a, 2, "orders-2", b"other")
    _, answer, _ = r.run(NOW + 60)
    assert _keys(answer.partitions) == [("orders-2", 0)] and answer.partitions[0].marks_wanted

    # The log start moved (records deleted): answered with the new start.
    produce(r.a, r.disk_a, 2, "orders-2")  # orders-2/1 is not touched ...
    _start, effects = r.a.delete_records("orders-1", 0, 2)
    r.disk_a.carry_out(r.a, effects)
    _, answer, _ = r.run(NOW + 70)
    starts = {(p.source_topic, p.partition): p.log_start_offset for p in answer.partitions}
    assert starts[("orders-1", 0)] == 2


def test_a_request_whose_answer_never_came__makes_the_next_one_full() -> None:
    r = _three_partitions()
    r.run(NOW + 10)
    r.run(NOW + 20)
    lost = r.request()  # its answer is lost
    assert lost.fetch_session.incremental

    again = r.request()

    assert again.fetch_session.epoch == rounds.OPENING and _keys(again.partitions) == ALL


def test_the_source_refuses_a_session_it_does_not_know__and_the_next_request_is_full() -> None:
    r = _three_partitions()
    r.run(NOW + 10)
    r.a.links.runtime["ab"].source_fetch_session = None  # as after a restart of A

    sent, answer, whole = r.run(NOW + 20)

    assert sent.fetch_session.incremental and whole is None
    assert answer.partitions == [] and "is not known here" in answer.fetch_session_refused
    assert answer.ready  # answered at once, not held
    sent, answer, whole = r.run(NOW + 30)
    assert sent.fetch_session.epoch == rounds.OPENING and _keys(answer.partitions) == ALL


def test_an_epoch_out_of_turn_is_refused_and_closes_the_session() -> None:
    r = _three_partitions()
    r.run(NOW + 10)
    request = r.request()
    skipped = replace(request, fetch_session=replace(request.fetch_session, epoch=5))

    answer = _serve(r.a, r.disk_a, skipped, NOW + 20)

    assert "expected epoch 1, got 5" in answer.fetch_session_refused
    assert r.a.links.runtime["ab"].source_fetch_session is None


def test_a_detach_on_the_source__serves_every_partition_again() -> None:
    r = _three_partitions()
    for t in (10, 20):
        r.run(NOW + t)
    config = r.a.links.get("ab")
    (mapping,) = config.mappings.values()
    admin.put_mapping(r.a, "ab", admin.versioned(r.a, replace(mapping, attached=False), NOW), NOW)

    _, answer, _ = r.run(NOW + 30)

    assert _keys(answer.partitions) == ALL
    assert {p.error.code for p in answer.partitions if p.error} == {ErrorCode.NOT_LED_ON_LINK}


def test_with_and_without_sessions__the_follower_ends_the_same() -> None:
    """Random produce on random partitions, a round after each: the
    follower's logs, high watermarks and link state are the same either way,
    and the session rounds name and answer fewer partitions."""
    runs = {True: _three_partitions(), False: _three_partitions(sessions=False)}
    named = {True: 0, False: 0}
    rng = random.Random(7)
    plan = [(rng.choice(ALL), rng.randint(0, 3)) for _ in range(40)]
    for i, ((topic, partition), n) in enumerate(plan):
        for sessions, r in runs.items():
            if n and partition == 0:
                produce(r.a, r.disk_a, n, topic)
            sent, _, _ = r.run(NOW + 10 * (i + 1))
            named[sessions] += len(sent.partitions)
    views = {}
    for sessions, r in runs.items():
        logs = {
            (t, p): (log.log_end_offset, log.high_watermark)
            for t in ("orders-1", "orders-2")
            for p, log in enumerate(r.b.topics[t].partitions)
        }
        views[sessions] = (logs, r.b.link_state("ab"), r.disk_b.batches)
    assert views[True] == views[False]
    assert named[True] < named[False] / 2


def test_a_catch_up_within_a_byte_budget__answers_what_it_carries__and_ends_the_same() -> None:
    """Two partitions three batches behind, a budget of one batch a round:
    the partitions the budget does not reach are spare, so a session round
    answers only what it carries (and what it must), and the follower
    catches up exactly as with full rounds."""
    runs = {s: _three_partitions(sessions=s, max_bytes=1) for s in (True, False)}
    for r in runs.values():
        for _batch in range(3):
            produce(r.a, r.disk_a, 2, "orders-1")
            produce(r.a, r.disk_a, 2, "orders-2")
    answered: dict[bool, list[int]] = {True: [], False: []}
    for i in range(12):
        for sessions, r in runs.items():
            _, answer, _ = r.run(NOW + 10 * (i + 1))
            answered[sessions].append(len(answer.partitions))
    for r in runs.values():
        assert [log.log_end_offset for log in r.b.topics["orders-2"].partitions] == [6, 0, 0]
        assert r.b.partition("orders-1", 0).log_end_offset == 6
        assert r.b.link_state("ab") == "FOLLOWING"
    assert runs[True].disk_b.batches == runs[False].disk_b.batches
    assert answered[False] == [4] * 12
    assert max(answered[True][2:]) <= 2 and answered[True][-1] == 0
    assert sum(answered[True]) * 3 < sum(answered[False])


# -- the source's kept sorting (`SourceFetchSession`, `log_feed`) -----------------------


def test_the_log_feed_names_what_moved_since__once_each__newest_first() -> None:
    feed = LogFeed()
    log = PartitionLog("t", 0)
    log.raise_durable(5)  # not watched: not reported
    assert feed.since(-1) == []
    feed.watch(log)
    other = PartitionLog("t", 1)
    feed.watch(other)
    seq = feed.seq
    log.bump_epoch(3, 0)
    other.bump_epoch(2, 0)
    log.bump_epoch(4, 0)
    assert feed.since(seq) == [("t", 0), ("t", 1)]  # one entry each, by last move
    assert feed.since(feed.seq) == []
    feed.relayout()
    assert feed.since(seq) == [] and feed.layout == 1


def _quiet_session() -> tuple[Round, fs.SourceFetchSession]:
    r = _three_partitions()
    produce(r.a, r.disk_a, 3, "orders-2")
    for t in (10, 20, 30):
        r.run(NOW + t)
    session = r.a.links.runtime["ab"].source_fetch_session
    assert isinstance(session, fs.SourceFetchSession)
    return r, session


def test_a_log_moved_without_telling_its_feed__is_caught_by_the_check_against_a_scan() -> None:
    """The kept sorting trusts the log feed; the check (on in every test and
    in validation runs) finds a move the feed was not told of."""
    r, session = _quiet_session()
    assert session.check_against_scan
    assert session.parts_to_serve(r.a, ()).serve == []  # all quiet
    r.a.partition("orders-2", 1).leader_epoch += 1  # a move the feed never hears of
    with pytest.raises(AssertionError, match="the kept sorting differs from a scan"):
        session.parts_to_serve(r.a, ())


def test_a_log_that_moved__and_a_log_replaced__are_sorted_again_and_answered() -> None:
    r, session = _quiet_session()
    r.a.partition("orders-2", 2).bump_epoch(7, 0)  # told: answered
    assert _keys(session.parts_to_serve(r.a, ()).serve) == [("orders-2", 2)]
    r.run(NOW + 40)
    assert session.parts_to_serve(r.a, ()).serve == []
    # A partition rebuilt from disk: another log object, equal bounds.
    before = r.a.partition("orders-2", 1)
    r.a.recover_partition("orders-2", 1, [])
    assert r.a.partition("orders-2", 1) is not before
    assert _keys(session.parts_to_serve(r.a, ()).serve) == [("orders-2", 1)]


def test_a_follower_takes_its_quiet_partitions_by_difference() -> None:
    """The follower keeps what its last round found quiet
    (`LinkRuntime.quiet_track`); the next round of the session looks only at
    what changed: a row written meanwhile is looked at again, goes the whole
    way, and is found quiet again the round after."""
    r, _session = _quiet_session()
    r.run(NOW + 40)
    runtime = r.b.links.runtime["ab"]
    track = runtime.quiet_track
    assert track is not None and len(track.found) == len(ALL)
    seq = track.seq
    r.run(NOW + 50)
    assert runtime.quiet_track is track and track.seq == seq + 1
    assert len(track.found) == len(ALL)
    row = runtime.rows[("orders-2", 1, "follower")]
    assert row.known_at_ms == NOW + 50  # (written as any quiet row is)
    told = row.source_high_watermark
    r.b.links.on_progress("ab", "orders-2", 1, "follower", row.log_end_offset, told + 5, NOW + 55)
    assert ("orders-2", 1) in track.written
    r.run(NOW + 60)
    assert row.source_high_watermark == told and row.known_at_ms == NOW + 60
    assert ("orders-2", 1) not in track.found and ("orders-2", 1) in track.failed
    r.run(NOW + 70)
    assert runtime.quiet_track is track and len(track.found) == len(ALL)


def test_a_follower_row_no_round_reaches__is_forgotten_by_difference() -> None:
    r, _session = _quiet_session()
    r.run(NOW + 40)
    runtime = r.b.links.runtime["ab"]
    r.run(NOW + 50)
    track = runtime.quiet_track
    assert track is not None
    r.b.links.on_progress("ab", "orders-9", 0, "follower", 0, 0, NOW + 55)  # no such partition
    assert ("orders-9", 0, "follower") in runtime.rows
    r.run(NOW + 60)
    assert runtime.quiet_track is track  # taken by difference
    assert ("orders-9", 0, "follower") not in runtime.rows
    assert len(track.found) == len(ALL)


def test_a_follower_sessions_quiet_partitions_changed_behind_its_back__are_caught() -> None:
    r, _session = _quiet_session()
    r.run(NOW + 40)
    assert r.follower is not None and fs.FollowerFetchSession.check_against_scan
    r.follower.known_hw[("orders-2", 2)] += 1  # not through an answer
    with pytest.raises(AssertionError, match="kept by difference are not what a scan finds"):
        r.run(NOW + 50)


def test_a_follower_log_moved_without_telling_its_feed__is_caught_by_the_check() -> None:
    r, _session = _quiet_session()
    r.run(NOW + 40)
    r.run(NOW + 50)
    assert r.b.links.runtime["ab"].quiet_track is not None
    log = r.b.partition("orders-2", 0)
    log.high_watermark -= 1  # a move the feed never hears of (the fetch stays the same)
    with pytest.raises(AssertionError, match="not what a look at each finds"):
        r.run(NOW + 60)


def test_the_sources_quiet_fold_takes_a_sessions_round_by_difference() -> None:
    """The source's fold takes the round after the one it took from what
    changed since (`FetchedAgain.changed`); a round whose changes leave out
    a partition that did change is caught by the check (on in every test)."""
    r, session = _quiet_session()
    r.run(NOW + 40)
    fold = r.a.links.runtime["ab"].fold
    assert fold.took is not None and fold.took[0] is session
    assert sorted(fold.rows) == ALL  # every partition quiet, counted in the fold
    r.run(NOW + 50)
    assert fold.took == (session, session.rounds) and sorted(fold.rows) == ALL
    produce(r.a, r.disk_a, 2, "orders-2")  # orders-2/0 has news: answered, it leaves
    r.run(NOW + 60)
    assert fold.took == (session, session.rounds)
    assert sorted(fold.rows) == [k for k in ALL if k != ("orders-2", 0)]

    def nothing(of: object) -> list[tuple[str, int, int]]:
        return []

    wrong = FetchedAgain(
        set, nothing, lambda _k: False, (session, session.rounds + 1), changed=set()
    )
    logs = r.a.topics["orders-2"].partitions
    with pytest.raises(AssertionError, match="not what a comparison of every partition finds"):
        r.a.links.on_fetched_again("ab", wrong, lambda _t: logs, NOW + 70)
