"""What a link's metrics say (`linkd.core.link_metrics`), and the counters the
core keeps for them (`LinkCounters`), on two clusters held in memory: A leads
orders- on link ab, B follows. Rounds are driven through `apply_fetched`, the
generator both shells run, so the counters count what they count.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from test_core_link_rounds import NOW, Disk, discover, produce, two_clusters

from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_metrics import STATES, link_samples
from linkd.core.requests import Execute, Note, Now, Request, WakeWaiters


def drive(procedure: Generator[Request, Any, Any], state: ClusterState, disk: Disk,
          now: int) -> None:
    """Answers the generator as a shell does: time, effects carried out, no-ops."""
    reply: Any = None
    try:
        while True:
            request = procedure.send(reply)
            if isinstance(request, Now):
                reply = now
            elif isinstance(request, Execute):
                disk.carry_out(state, list(request.effects))
                reply = now
            elif isinstance(request, Note | WakeWaiters):
                reply = None
            else:
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration:
        return


def round_(a: ClusterState, b: ClusterState, disk_a: Disk, disk_b: Disk, now: int) -> None:
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=now)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, now, disk_a.read, 1 << 20, 1 << 20
    )
    drive(rounds.apply_fetched(b, "ab", answer, request.local_of, now), b, disk_b, now)


def test_states_are_every_link_state() -> None:
    assert STATES == (
        "DISCONNECTED", "CATCHING_UP", "FOLLOWING", "SYNCING", "IN_SYNC", "OUT_OF_SYNC"
    )


def test_no_contact_yet__state_only__no_lag_is_made_up() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 4)
    (sample,) = link_samples(b, NOW)
    assert sample.name == "ab" and sample.state == "DISCONNECTED"
    assert sample.partitions == () and sample.max_lag is None
    assert sample.counters.records == 0


def test_a_round_counts_the_records_and_bytes_it_made_durable__and_the_lag_is_0() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    produce(a, disk_a, 2)
    round_(a, b, disk_a, disk_b, NOW + 10)

    (sample,) = link_samples(b, NOW + 10)
    assert sample.state == "FOLLOWING"
    assert sample.counters.records == 5
    assert sample.counters.bytes == sum(len(d) for _b, _n, d in disk_a.batches[("src-1", 0)])
    assert [(p.topic, p.partition, p.lag_records, p.lag_ms) for p in sample.partitions] == [
        ("orders-1", 0, 0, 0)
    ]
    assert sample.max_lag == (0, 0)
    # The leading side: its state, no follower lag, nothing replicated into it.
    (leading,) = link_samples(a, NOW + 10)
    assert leading.partitions == () and leading.max_lag is None
    assert leading.counters.records == 0


def test_a_lag_learned_is_shown__with_its_age__and_the_max_is_the_largest() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    round_(a, b, disk_a, disk_b, NOW + 10)
    produce(a, disk_a, 7)
    # A round whose answer carries the new HW but no bytes (no budget on the source).
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 20)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, NOW + 20, disk_a.read, 0, 0
    )
    drive(rounds.apply_fetched(b, "ab", answer, request.local_of, NOW + 20), b, disk_b, NOW + 20)
    (sample,) = link_samples(b, NOW + 500)
    lags = [(p.lag_records, p.lag_ms) for p in sample.partitions]
    # Caught up at NOW + 10 (the first round), behind since: 490 ms at NOW + 500.
    assert lags == [(7, 500 - 10)]
    assert sample.max_lag == (7, 490)


def test_a_divergence_truncation_is_counted_once_it_is_durable() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    produce(a, disk_a, 2)
    round_(a, b, disk_a, disk_b, NOW + 10)
    _removed, _epoch, effects = a.unclean_election("orders-1", 0, 3)
    disk_a.carry_out(a, effects)
    round_(a, b, disk_a, disk_b, NOW + 20)  # marks asked for
    round_(a, b, disk_a, disk_b, NOW + 30)  # told where to cut

    counters = b.links.runtime["ab"].counters
    assert counters.truncations == 1 and counters.cuts == 0
    assert counters.records == 5  # what was appended stays counted: a counter never falls
    assert b.partition("orders-1", 0).log_end_offset == 3


def test_a_followed_partition_no_round_reached_yet__makes_max_lag_unknown__not_0() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    round_(a, b, disk_a, disk_b, NOW + 10)
    assert link_samples(b, NOW + 10)[0].max_lag == (0, 0)
    _topic, effects = a.create_topic("orders-2", 1, {}, "src-2")
    disk_a.carry_out(a, effects)
    produce(a, disk_a, 9, topic="orders-2")
    discover(a, b, disk_b)  # B creates orders-2; no round has reached it

    (sample,) = link_samples(b, NOW + 20)
    assert [(p.topic, p.lag_records) for p in sample.partitions] == [("orders-1", 0)]
    assert sample.max_lag is None

    round_(a, b, disk_a, disk_b, NOW + 30)
    (sample,) = link_samples(b, NOW + 30)
    assert [(p.topic, p.lag_records) for p in sample.partitions] == [
        ("orders-1", 0), ("orders-2", 0)
    ]
    assert sample.max_lag == (0, 0) and sample.counters.records == 12


def test_partitions_by_state__the_leaders_view__and_failed_calls() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    round_(a, b, disk_a, disk_b, NOW + 10)
    (sample,) = link_samples(b, NOW + 10)
    assert dict(sample.partition_states) == {
        "copying": 1, "lag_unknown": 0, "refused": 0, "diverged": 0, "stopped": 0,
    }
    assert sample.leader_partitions == () and sample.errors == ()
    # The leading side knows its follower's position from its fetches: the
    # first asked from 0 (3 behind), the next from 3 (caught up).
    (leading,) = link_samples(a, NOW + 10)
    assert leading.partition_states == ()  # A follows nothing on ab
    assert [(p.topic, p.lag_records) for p in leading.leader_partitions] == [("orders-1", 3)]
    round_(a, b, disk_a, disk_b, NOW + 15)
    (leading,) = link_samples(a, NOW + 15)
    assert [(p.topic, p.lag_records) for p in leading.leader_partitions] == [("orders-1", 0)]
    produce(a, disk_a, 4)
    (leading,) = link_samples(a, NOW + 20)
    assert [(p.topic, p.lag_records) for p in leading.leader_partitions] == [("orders-1", 4)]

    # A partition no round reached yet is counted as lag_unknown.
    _topic, effects = a.create_topic("orders-2", 1, {}, "src-2")
    disk_a.carry_out(a, effects)
    discover(a, b, disk_b)
    (sample,) = link_samples(b, NOW + 20)
    assert dict(sample.partition_states)["lag_unknown"] == 1

    # Failed calls are counted by code, the last one kept for describe-link.
    unreachable = ClusterError(ErrorCode.LINK_UNREACHABLE, "link 'ab'", "cannot reach A")
    b.links.on_contact_lost("ab", NOW + 30, unreachable)
    b.links.on_contact_lost("ab", NOW + 40, unreachable)
    (sample,) = link_samples(b, NOW + 40)
    assert sample.errors == (("LINK_UNREACHABLE", 2),)
    last = b.links.runtime["ab"].last_error
    assert last is not None and (last.code, last.message, last.at_ms) == (
        "LINK_UNREACHABLE", "cannot reach A", NOW + 40
    )
