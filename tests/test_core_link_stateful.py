"""Random conversations between two clusters over one link, checked by Hypothesis.

A leads the namespace orders- to B over link ab (the helpers of
test_core_link_rounds.py: the same core functions both shells call, with the
test playing the transport and the disk). Hypothesis draws the steps: A takes
writes, a fetch round runs with a large or a tiny byte budget, time passes, A
loses the tail of its log in an unclean election, a client tries to write on
B. After every step:
- B never takes a client write (invariant 3);
- B's high watermark is at most its log end, and every batch it holds is a
  batch A held at that offset, byte for byte: B copies, it never invents
  (invariants 1, 2; A may since have lost it, and B cuts it at its next round);
- the status never lies (invariant 9): while B says FOLLOWING with lag 0 and
  lag known, its log holds A's records up to the source high watermark of the
  last round;
and `settle` (rounds until nothing moves) leaves B's log equal to A's and the
link FOLLOWING (liveness).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from test_core_link_rounds import NOW, Disk, discover, fetch_round, produce, two_clusters

from linkd.core import link_admin
from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError

TOPIC = "orders-1"
Batches = list[tuple[int, int, bytes]]


class TwoClusters(RuleBasedStateMachine):
    a: ClusterState
    b: ClusterState
    disk_a: Disk
    disk_b: Disk

    @initialize()
    def setup(self) -> None:
        self.a, self.b, self.disk_a, self.disk_b = two_clusters()
        discover(self.a, self.b, self.disk_b)
        self.now = NOW + 10
        self.written = 0
        self.a_at_round: Batches = []
        self.a_ever: set[tuple[int, bytes]] = set()

    # -- helpers ------------------------------------------------------------------------

    def a_batches(self) -> Batches:
        return list(self.disk_a.batches.get((self.a.topic(TOPIC).topic_id, 0), []))

    def b_batches(self) -> Batches:
        return list(self.disk_b.batches.get((self.b.topic(TOPIC).topic_id, 0), []))

    def row(self) -> link_admin.PartitionLag | None:
        summary = link_admin.link_summary(self.b, "ab", self.now)
        return next((p for p in summary.partitions if p.topic == TOPIC), None)

    # -- steps --------------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def a_takes_writes(self, n: int) -> None:
        self.written += 1
        produce(self.a, self.disk_a, n, TOPIC, f"w{self.written}".encode())
        self.a_ever.update((base, data) for base, _next, data in self.a_batches())

    @rule(budget=st.sampled_from([1, 200, 1 << 20]), step=st.integers(1, 700))
    def a_fetch_round(self, budget: int, step: int) -> None:
        self.now += step
        fetch_round(self.a, self.b, self.disk_a, self.disk_b, self.now, budget)
        self.a_at_round = self.a_batches()

    @rule(step=st.integers(100, 3_000))
    def time_passes(self, step: int) -> None:
        self.now += step

    @rule(lose=st.integers(1, 3))
    def unclean_election_on_a(self, lose: int) -> None:
        batches = self.a_batches()
        if not batches:
            return
        keep = batches[max(0, len(batches) - lose)][0]
        _removed, _epoch, effects = self.a.unclean_election(TOPIC, 0, keep)
        self.disk_a.carry_out(self.a, effects)

    @rule()
    def a_client_writes_on_b(self) -> None:
        data = rb.build_batch([rb.RecordSpec(None, b"on-b", self.now)])
        try:
            self.b.produce(TOPIC, 0, data, "", self.now)
        except ClusterError:
            return
        raise AssertionError("B took a client write into a topic it follows")

    @rule()
    def settle(self) -> None:
        for _ in range(40):
            self.now += 10
            answer, _applied, moved = fetch_round(
                self.a, self.b, self.disk_a, self.disk_b, self.now
            )
            self.a_at_round = self.a_batches()
            if not answer.ready and not moved and self.b_batches() == self.a_batches():
                break
        assert self.b_batches() == self.a_batches()
        log_a, log_b = self.a.partition(TOPIC, 0), self.b.partition(TOPIC, 0)
        assert log_b.high_watermark == log_a.high_watermark
        assert self.b.link_state("ab") == "FOLLOWING"
        row = self.row()
        assert row is not None and row.lag_known and row.lag_records == 0, row

    # -- what must hold after every step ------------------------------------------------

    @invariant()
    def b_holds_only_copies_of_a(self) -> None:
        log = self.b.partition(TOPIC, 0)
        assert log.high_watermark <= log.log_end_offset
        for base, _next, data in self.b_batches():
            assert (base, data) in self.a_ever, f"B's batch at {base} was never A's there"

    @invariant()
    def the_status_never_lies(self) -> None:
        if self.b.link_state("ab") != "FOLLOWING":
            return
        row = self.row()
        if row is None:
            # Every partition B follows has a row in describe-link.
            raise AssertionError(f"FOLLOWING, but {TOPIC}-0 has no row")
        if not row.lag_known or row.lag_records != 0:
            return
        upto = row.source_high_watermark
        mine = [b for b in self.b_batches() if b[1] <= upto]
        theirs = [b for b in self.a_at_round if b[1] <= upto]
        assert mine == theirs, "FOLLOWING with lag 0, but B lacks records A held"


TwoClusters.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
test_two_clusters_over_one_link = TwoClusters.TestCase
