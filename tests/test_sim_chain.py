"""The chain question (mirroring a mirror, failing back mirrored data):
producer ids and sequences on the destinations, and idempotent producers
after failover. The shipped `chain-failover` story runs clean; the check it
needs, `sequence_refused`, fires on a planted history and on the story with
per-cluster producer id ranges undone (fix 45)."""

from __future__ import annotations

from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.faults import Faults
from linkd.core.restart import compacted
from linkd.core.transactions import producer_id_base
from sim import scenario as scenarios
from sim.checkers import CutEvent, check_sequence_refusals
from sim.history import History, Op, OpType, Send
from sim.runner import run_summary
from sim.world import Simulation

RANGE = 1 << 40  # ids a cluster hands out from its base (transactions.producer_id_base)


def _send(process: str, cluster: str, type_: OpType, at: int, value: str, error: str = "") -> Op:
    return Op(process, "producer", cluster, type_, at, at + 1, Send("A-t0", -1, value), error)


def _kinds(history: History, cuts: dict[tuple[str, str, int], list[CutEvent]]) -> list[str]:
    return [v.invariant for v in check_sequence_refusals(history, cuts)]


def test_a_sequence_refusal_no_cut_nor_unknown_send_explains_is_reported() -> None:
    refused = _send("app", "B", "fail", 5000, "app-9", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    history = History([_send("app", "B", "ok", 4000, "app-8"), refused])
    found = check_sequence_refusals(history, {})
    assert [v.invariant for v in found] == ["sequence_refused"]
    assert "'app-9'" in found[0].detail and "on B" in found[0].detail
    # UNKNOWN_PRODUCER_ID is judged alike.
    unknown = _send("app", "B", "fail", 5000, "app-9", "UNKNOWN_PRODUCER_ID")
    assert _kinds(History([unknown]), {}) == ["sequence_refused"]
    # A cut of the topic on that cluster before the producer's first send
    # there removed none of its batches: still reported.
    early = {("B", "A-t0", 1): [CutEvent(3000, 10, False)]}
    assert _kinds(history, early) == ["sequence_refused"]
    # A cut on another cluster or of another topic explains nothing here.
    elsewhere = {("C", "A-t0", 0): [CutEvent(4500, 10, False)]}
    assert _kinds(history, elsewhere) == ["sequence_refused"]


def test_a_cut_or_an_unknown_send_since_the_first_send_explains_a_refusal() -> None:
    refused = _send("app", "B", "fail", 5000, "app-9", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    history = History([_send("app", "B", "ok", 4000, "app-8"), refused])
    # A recovery (or an unclean election) cut the producer's last batches.
    assert _kinds(history, {("B", "A-t0", 2): [CutEvent(4500, 10, False)]}) == []
    # A send whose outcome is unknown: its batch may be lost, and the next
    # one is numbered after it.
    lost = History([_send("app", "B", "info", 4000, "app-8", "timeout"), refused])
    assert _kinds(lost, {}) == []
    # Another producer's unknown send explains nothing.
    other = History([_send("other", "B", "info", 4000, "o-1", "timeout"), refused])
    assert _kinds(other, {}) == ["sequence_refused"]
    # Refusals a coordinator's fence answers too, and other refusals, are not judged.
    fenced = _send("app", "B", "fail", 5000, "app-9", "INVALID_PRODUCER_EPOCH")
    writable = _send("app", "B", "fail", 5000, "app-9", "FOLLOWER_TOPIC_NOT_WRITABLE")
    assert _kinds(History([fenced, writable]), {}) == []


def _producer_ranges(sim: Simulation, cluster: str) -> dict[int, set[str]]:
    """For each partition of A-t0 on `cluster`: the clusters whose id ranges
    its data batches' producer ids come from."""
    bases = {cid: producer_id_base(cid) for cid in sim.cluster_ids}
    out: dict[int, set[str]] = {}
    node = sim.clusters[cluster]
    for p in range(len(node.state.topics["A-t0"].partitions)):
        for b in node.store("A-t0", p).batches:
            header, _records = rb.decode_records(b.data)
            if header.is_control:
                continue
            owner = {c for c, base in bases.items() if base <= header.producer_id < base + RANGE}
            assert len(owner) == 1, f"producer id {header.producer_id} in no cluster's range"
            out.setdefault(p, set()).update(owner)
    return out


def test_chain_failover_runs_clean_and_keeps_every_hop_s_producer_ids() -> None:
    for seed in (1, 2):
        sim = Simulation(scenarios.load("chain-failover"), seed)
        sim.run()
        assert sim.violations == [], f"seed {seed}: {sim.violations}"
        m = sim.metrics.flat()
        # B's and C's failovers, A's relink to C (a confirmed recovery) and
        # the reversal that gives A the lead back all happened.
        assert m["actions_ok"] == 7 and m["recoveries"] == 1 and m["reversals"] == 1
        refused = [
            o for o in sim.history.sends() if o.type == "fail" and o.process.startswith("app")
        ]
        assert refused == []
        # C holds A's records through two hops and B's through one, with
        # their producers' ids; A, back as the leader, holds all three
        # clusters' producers, its own last ones included.
        for cluster in ("A", "C"):
            assert all(
                owners == {"A", "B", "C"} for owners in _producer_ranges(sim, cluster).values()
            ), cluster


def test_with_shared_producer_id_ranges_the_promoted_producers_are_refused() -> None:
    s = run_summary("chain-failover", 1, {"undo_fix": 45})
    found = [v["invariant"] for v in s["violations"]]
    assert found and set(found) == {"sequence_refused"}
    detail = " ".join(v["detail"] for v in s["violations"])
    # The application on B after the first failover, and the one on C after
    # the second, meet the producer state copied with their ids.
    assert "on B refused OUT_OF_ORDER_SEQUENCE_NUMBER" in detail
    assert "on C refused OUT_OF_ORDER_SEQUENCE_NUMBER" in detail


def test_fix_45_undone_survives_a_restart_and_a_snapshot() -> None:
    undone = Faults.undoing(45)
    state = ClusterState("A", faults=undone)
    pid, _epoch, _effects = state.init_producer_id("", 60_000, 0)
    assert pid == 1000
    assert ClusterState("A").init_producer_id("", 60_000, 0)[0] == producer_id_base("A")
    # A snapshot folded on a fresh state starts where the cluster's own does.
    assert compacted("A", None, [], undone)["txn"]["next_producer_id"] == 1000
    assert compacted("A", None, [])["txn"]["next_producer_id"] == producer_id_base("A")
