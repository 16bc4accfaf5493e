"""MirrorMaker 2 flows in the simulator (sim/mirror_driver.py): stories told
through the real core, plus the link-versus-mirror comparison and its CLI."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest

from linkd.core import records as rb
from linkd.core.mirror.model import TopicPartition
from linkd.core.mirror.policy import ReplicationPolicy
from linkd.core.mirror.wire import decode_checkpoint, decode_offset_sync
from sim import checkers
from sim import scenario as scenarios
from sim.cli import compare
from sim.cluster_node import SimCluster
from sim.history import History, Op, Poll, Send
from sim.metrics import Metrics
from sim.mirror_driver import Fetched, MirrorDriver
from sim.runner import run_summary
from sim.world import Simulation

SHIPPED = "mirror-vs-link-failover"


def scenario(**overrides: Any) -> scenarios.Scenario:
    """A chain A->B run as a mirror, with one producer on A."""
    data: dict[str, Any] = {
        "name": "mirror-story",
        "description": "",
        "run": {"duration_ms": 8000, "liveness_ms": 10000},
        "topology": {"kind": "chain", "clusters": ["A", "B"], "link_type": "mirror"},
        "namespace": {"topics": 1, "partitions": 2},
        "edges": [
            {
                "source": "A",
                "target": "B",
                "refresh_topics_interval_ms": 1000,
                "emit_checkpoints_interval_ms": 1000,
                "sync_group_offsets": True,
                "sync_group_offsets_interval_ms": 1000,
                "offset_lag_max": 10,
            }
        ],
        "workloads": [
            {"kind": "producer", "name": "app", "cluster": "A", "topic": "A-t0", "rate_per_s": 40}
        ],
    }
    data.update(overrides)
    return scenarios.parse(data)


def values(node: SimCluster, topic: str, partition: int) -> list[tuple[int, str]]:
    """(offset, value) of the data records of one partition, in log order."""
    out: list[tuple[int, str]] = []
    for b in node.store(topic, partition).batches:
        header, records = rb.decode_records(b.data)
        if not header.is_control:
            out += [(r.offset, r.value.decode()) for r in records if r.value]
    return out


def run(spec: scenarios.Scenario, seed: int = 1) -> Simulation:
    sim = Simulation(spec, seed)
    sim.run()
    assert sim.violations == [], sim.violations
    return sim


# -- the driver ---------------------------------------------------------------------------


def test_records_go_to_the_renamed_topic__at_offsets_of_the_target() -> None:
    """B already holds records in A.A-t0 (a local producer wrote them first):
    the mirror appends A's records after them, in A's order, at shifted
    offsets; A's offsets are not preserved."""
    spec = scenario(
        workloads=[
            {
                "kind": "producer",
                "name": "local",
                "cluster": "B",
                "topic": "A.A-t0",
                "rate_per_s": 40,
                "stop_ms": 1500,
            },
            {
                "kind": "producer",
                "name": "app",
                "cluster": "A",
                "topic": "A-t0",
                "rate_per_s": 40,
                "start_ms": 2000,
            },
        ],
        actions=[
            {"at_ms": 0, "kind": "create_topic", "cluster": "B", "topic": "A.A-t0", "partitions": 2}
        ],
    )
    sim = run(spec)
    a, b = sim.clusters["A"], sim.clusters["B"]
    assert "A-t0" not in b.state.topics  # offsets not preserved: no same-named copy
    shifted = 0
    for p in range(2):
        upstream = values(a, "A-t0", p)
        downstream = [(o, v) for o, v in values(b, "A.A-t0", p) if v.startswith("app-")]
        local = [(o, v) for o, v in values(b, "A.A-t0", p) if v.startswith("local-")]
        assert upstream and local
        assert [v for _o, v in downstream] == [v for _o, v in upstream]
        assert min(o for o, _v in downstream) >= len(local)  # after the prior data
        shifted += sum(1 for (uo, _), (do, _) in zip(upstream, downstream, strict=True) if uo != do)
    assert shifted > 0
    stats = sim.mirrors["B/A-B"].stats
    assert stats.records_copied == sum(len(values(a, "A-t0", p)) for p in range(2))
    assert stats.topics_created == 1  # only the offset-syncs topic: A.A-t0 existed


def test_active_active__cycle_detection__no_record_comes_back() -> None:
    """A<->B mirrors (a ring of two): A-t0 reaches B as A.A-t0 and B-t0 reaches
    A as B.B-t0; the policy refuses to send A.A-t0 back to A (nor B.B-t0 to B)."""
    edge = {"refresh_topics_interval_ms": 500}
    spec = scenario(
        topology={"kind": "ring", "clusters": ["A", "B"], "link_type": "mirror"},
        edges=[{"source": "A", "target": "B", **edge}, {"source": "B", "target": "A", **edge}],
        workloads=[
            {"kind": "producer", "name": "pa", "cluster": "A", "topic": "A-t0", "rate_per_s": 30},
            {"kind": "producer", "name": "pb", "cluster": "B", "topic": "B-t0", "rate_per_s": 30},
        ],
    )
    sim = run(spec)
    a, b = sim.clusters["A"], sim.clusters["B"]
    policy = ReplicationPolicy()

    def data_topics(node: SimCluster) -> set[str]:
        return {t for t in node.state.topics if not policy.is_internal_topic(t)}

    assert data_topics(a) == {"A-t0", "B.B-t0"}
    assert data_topics(b) == {"B-t0", "A.A-t0"}
    for node in (a, b):
        for topic in data_topics(node):
            chain = policy.all_sources(topic)
            assert len(chain) == len(set(chain)) and node.cluster_id not in chain
    for node, topic, local in ((b, "A.A-t0", a), (a, "B.B-t0", b)):
        for p in range(2):
            copied = [v for _o, v in values(node, topic, p)]
            assert copied == [v for _o, v in values(local, topic.split(".", 1)[1], p)]
            assert len(copied) == len(set(copied))  # each record exactly once


def test_offset_syncs_and_checkpoints_are_written_and_translate() -> None:
    """Syncs land in mm2-offset-syncs.B.internal on A (MM2's default location),
    checkpoints of the consumer group in A.checkpoints.internal on B, and KIP-545
    writes the translated offsets as the group's offsets on B."""
    spec = scenario(
        workloads=[
            {"kind": "producer", "name": "app", "cluster": "A", "topic": "A-t0", "rate_per_s": 40},
            {"kind": "consumer", "name": "reader", "cluster": "A", "topic": "A-t0", "group": "g1"},
        ]
    )
    sim = run(spec)
    a, b = sim.clusters["A"], sim.clusters["B"]
    mirror = sim.mirrors["B/A-B"]
    syncs = [
        decode_offset_sync(r.key, r.value)
        for batch in a.store("mm2-offset-syncs.B.internal", 0).batches
        for r in rb.decode_records(batch.data)[1]
    ]
    assert syncs and {s.topic_partition.topic for s in syncs} == {"A-t0"}
    assert mirror.stats.offset_syncs_written == len(syncs)
    checkpoints = [
        decode_checkpoint(r.key, r.value)
        for batch in b.store("A.checkpoints.internal", 0).batches
        for r in rb.decode_records(batch.data)[1]
    ]
    assert checkpoints and {c.consumer_group_id for c in checkpoints} == {"g1"}
    assert {c.topic_partition.topic for c in checkpoints} == {"A.A-t0"}
    # The mirror's own group (connect-mirror-A-B) is excluded by MM2's group filter.
    assert "connect-mirror-A-B" in {g for g, _s, _p in a.state.groups.list_groups()}
    upstream = a.state.groups.committed("g1", None)
    downstream = b.state.groups.committed("g1", None)
    assert set(downstream) == {("A.A-t0", 0), ("A.A-t0", 1)}
    for p in range(2):
        translated = mirror.checkpoints.store.translate_downstream(
            TopicPartition("A-t0", p), upstream[("A-t0", p)].offset
        )
        assert translated is not None and downstream[("A.A-t0", p)].offset <= translated
    assert mirror.stats.group_offsets_written > 0


def test_offset_syncs_on_the_target__checkpoints_still_flow() -> None:
    spec = scenario(
        edges=[
            {
                "source": "A",
                "target": "B",
                "emit_checkpoints_interval_ms": 1000,
                "offset_syncs_topic_location": "target",
            }
        ],
        workloads=[
            {"kind": "producer", "name": "app", "cluster": "A", "topic": "A-t0", "rate_per_s": 40},
            {"kind": "consumer", "name": "reader", "cluster": "A", "topic": "A-t0", "group": "g1"},
        ],
    )
    sim = run(spec)
    assert "mm2-offset-syncs.A.internal" in sim.clusters["B"].state.topics
    assert not any(t.startswith("mm2-") for t in sim.clusters["A"].state.topics)
    assert sim.mirrors["B/A-B"].stats.checkpoints_emitted > 0


def test_no_progress_while_cut_off__resumes_after_the_heal() -> None:
    """A poll lost in the cut is given up after the call timeout (10 s), as a
    link's call is; then the mirror copies what was written meanwhile."""
    spec = scenario(
        run={"duration_ms": 20000, "liveness_ms": 10000},
        faults=[
            {
                "at_ms": 3000,
                "kind": "split",
                "side_a": ["A"],
                "side_b": ["B"],
                "duration_ms": 3000,
            }
        ],
    )
    sim = Simulation(spec, 1)
    sim.setup()
    mirror = sim.mirrors["B/A-B"]
    sim.queue.run_until(3500)
    before = mirror.stats.records_copied
    sim.queue.run_until(5990)
    assert mirror.stats.records_copied == before > 0
    sim.queue.run_until(16000)
    assert mirror.stats.records_copied > before + 300  # the backlog of the cut too
    sim.queue.run_until(20000)  # the producer stops here
    sim.queue.run_until(30000, stop=sim.converged)
    assert sim.converged()


def test_a_crashed_target_stalls_the_mirror__it_catches_up_after_restart() -> None:
    spec = scenario(faults=[{"at_ms": 3000, "kind": "crash", "node": "B", "duration_ms": 2000}])
    sim = run(spec)
    a, b = sim.clusters["A"], sim.clusters["B"]
    for p in range(2):
        upstream = [v for _o, v in values(a, "A-t0", p)]
        downstream = [v for _o, v in values(b, "A.A-t0", p)]
        assert set(downstream) == set(upstream)  # at least once: all there


# -- failover: link versus mirror ------------------------------------------------------------


def test_compare__link_and_mirror_side_by_side() -> None:
    """The same failover both ways. The link keeps offsets and replicates the
    group's committed offsets: few re-reads. The mirror's consumer resumes at
    offsets translated through sparse offset syncs (one per offset_lag_max
    records) and KIP-545: more re-reads, but never a skip."""
    result = compare(SHIPPED, 1, {})
    rows = result["rows"]
    assert result["columns"] == ["link", "mirror"]
    assert all(run["violations"] == [] for run in result["runs"].values())
    assert rows["consumer_skips_across_failover"] == {"link": 0, "mirror": 0}
    dups = rows["consumer_duplicates_across_failover"]
    assert dups["link"] < dups["mirror"]
    assert rows["rpo_records"]["link"] is not None and rows["rpo_records"]["mirror"] is not None
    assert rows["mirror_duplicates_stored"] == {"link": None, "mirror": 0}
    mirror_metrics = result["runs"]["mirror"]["metrics"]
    assert mirror_metrics["mirror_group_offsets_written"] > 0
    assert mirror_metrics["mirror_checkpoints_emitted"] > 0


def test_mirror_rpo_counts_acknowledged_values_missing_on_the_target() -> None:
    spec = scenarios.apply_params(scenarios.load(SHIPPED), {"link_type": "mirror"})
    sim = run(spec, 2)
    acked = {
        op.value.value
        for op in sim.history.sends()
        if op.type == "ok" and op.cluster == "A" and isinstance(op.value, Send) and op.value.value
    }
    held = {v for p in range(3) for _o, v in values(sim.clusters["B"], "A.A-t0", p)}
    assert sim.metrics.values["rpo_records"] == len(acked - held)


@pytest.mark.parametrize(
    ("options", "resumes_at"),
    [
        ({"sync_group_offsets": False}, "checkpoints"),
        ({"sync_group_offsets": False, "emit_checkpoints_interval_ms": 600_000}, "log start"),
    ],
)
def test_mirror_failover_without_kip545__checkpoints__else_the_log_start(
    options: dict[str, Any], resumes_at: str
) -> None:
    """Without KIP-545 the consumer starts at the group's translated
    checkpoints (RemoteClusterUtils); without checkpoints either, at the log
    start: it reads everything again. Never a skip."""
    spec = scenarios.load(SHIPPED)
    spec = dataclasses.replace(
        spec, edges=tuple(dataclasses.replace(e, type="mirror", **options) for e in spec.edges)
    )
    sim = run(spec)
    m = sim.metrics.values
    assert m["consumer_skips_across_failover"] == 0
    read_on_a = {
        value
        for op in sim.history.polls()
        if op.type == "ok" and op.cluster == "A" and isinstance(op.value, Poll)
        for _p, _o, value in op.value.records
    }
    if resumes_at == "log start":
        assert m["consumer_duplicates_across_failover"] == len(read_on_a)
    else:
        assert 0 < m["consumer_duplicates_across_failover"] < len(read_on_a)


def test_determinism__same_seed_same_digest__types_differ() -> None:
    first = run_summary(SHIPPED, 3, {"link_type": "mirror"})
    again = run_summary(SHIPPED, 3, {"link_type": "mirror"})
    link = run_summary(SHIPPED, 3, {"link_type": "link"})
    assert first["trace_digest"] == again["trace_digest"]
    assert first["metrics"] == again["metrics"]
    assert link["trace_digest"] != first["trace_digest"]


# -- checkers and metrics --------------------------------------------------------------------


def test_mirror_at_least_once_checker__flags_a_commit_past_a_missing_record() -> None:
    final: checkers.FinalLogs = {
        ("A", "t", 0): {0: "v0", 1: "v1", 2: "v2"},
        ("B", "A.t", 0): {5: "v0", 6: "v1"},
    }
    ok = checkers.MirrorCopy("A-B", "A", "t", 0, "B", "A.t", 2)
    bad = dataclasses.replace(ok, committed=3)
    assert checkers.check_mirror_copies([ok], final, {}) == []
    found = checkers.check_mirror_copies([bad], final, {})
    assert [v.invariant for v in found] == ["mirror_at_least_once"]
    assert "(2, 'v2')" in found[0].detail
    # Past a reported cut of the source, records are newer than the copy: not judged.
    assert checkers.check_mirror_copies([bad], final, {("A", "t", 0): [2]}) == []


def test_a_mirror_that_commits_without_copying_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broken flow that acknowledges polls without producing them: its
    committed source positions run ahead of the target."""

    def produce_nothing(self: MirrorDriver, fetched: Fetched, generation: int) -> None:
        self._acknowledged(fetched, [], None, generation)

    monkeypatch.setattr(MirrorDriver, "_produce", produce_nothing)
    sim = Simulation(scenario(), 1)
    sim.run()
    assert "mirror_at_least_once" in {v.invariant for v in sim.violations}


def test_duplicates_and_skips_across_a_mirror_failover_compare_values() -> None:
    """A planted history: session 0 reads t on A, session 1 reads A.t on B at
    other offsets. One value is read again (a duplicate); one stored below the
    final position is never read (a skip)."""
    history = History()
    history.add(Op("r", "source_consumer", "A", "ok", 0, 1, Poll("t", ((0, 0, "a"), (0, 1, "b")))))
    history.add(
        Op("r", "source_consumer", "B", "ok", 2, 3, Poll("A.t", ((0, 11, "b"), (0, 13, "e")), 1))
    )
    final = {
        ("A", "t", 0): {0: "a", 1: "b", 2: "c"},
        ("B", "A.t", 0): {10: "a", 11: "b", 12: "c", 13: "e"},
    }
    metrics = Metrics()
    metrics.from_history(history, final)
    assert metrics.values["consumer_duplicates_across_failover"] == 1
    assert metrics.values["consumer_skips_across_failover"] == 1


# -- scenarios and the command line ----------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"edges": [{"source": "A", "target": "B", "type": "mm2"}]}, "type = 'mm2'"),
        (
            {"edges": [{"source": "A", "target": "B", "type": "mirror", "mode": "SYNC"}]},
            "has no SYNC mode",
        ),
        (
            {"edges": [{"source": "A", "target": "B", "emit_checkpoints_interval_ms": 0}]},
            "emit_checkpoints_interval_ms = 0 must be >= 1",
        ),
        (
            {"edges": [{"source": "A", "target": "B", "offset_syncs_topic_location": "x"}]},
            "offset_syncs_topic_location = 'x'",
        ),
        ({"edges": [{"source": "A", "target": "B", "offset_lag_max": -1}]}, "must be >= 0"),
        ({"topology": {"link_type": "bridge"}}, "link_type = 'bridge'"),
        ({"topology": {"link_type": "mirror", "mode": "SYNC"}}, "has no SYNC mode"),
    ],
)
def test_scenario_errors_name_the_key(edit: dict[str, Any], message: str) -> None:
    with pytest.raises(scenarios.ScenarioError, match=message):
        scenarios.parse({"name": "bad", **edit})


def test_link_type_parameter_overrides_every_edge() -> None:
    spec = scenarios.parse(
        {"name": "p", "edges": [{"source": "A", "target": "B", "type": "mirror"}]}
    )
    linked = scenarios.apply_params(spec, {"link_type": "link"})
    assert linked.topology.link_type == "link" and linked.edges[0].type == ""
    with pytest.raises(scenarios.ScenarioError, match="parameter link_type = 'x'"):
        scenarios.apply_params(spec, {"link_type": "x"})
    with pytest.raises(scenarios.ScenarioError, match="no SYNC mode"):
        scenarios.apply_params(spec, {"mode": "SYNC"})


def ccr_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_compare__table_and_json() -> None:
    out = ccr_sim("compare", SHIPPED, "--seed", "1")
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[1].split()
    assert header == ["link", "mirror"]
    for row in ("rpo_records", "consumer_duplicates_across_failover", "violations"):
        assert row in out.stdout
    out = ccr_sim("compare", SHIPPED, "--seed", "1", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["rows"]["consumer_skips_across_failover"] == {"link": 0, "mirror": 0}
    assert set(data["runs"]) == {"link", "mirror"}
    listed = ccr_sim("list-scenarios")
    assert SHIPPED in listed.stdout
    refused = ccr_sim("compare", SHIPPED, "--seed", "1", "--param", "link_type=mirror")
    assert refused.returncode == 2 and "link_type" in refused.stderr


def test_a_remote_topic_is_created_with_its_source_topics_configs() -> None:
    """As the engine and MM2's createNewTopics: the remote topic holds no
    record under the target's defaults (a default retention could delete
    copied records before any later sync). The configs config sync would set
    are those the source topic sets itself."""
    spec = scenario(
        namespace={"topics": 1, "partitions": 2, "retention_ms": 3_600_000,
                   "cleanup_policy": "compact,delete"},
    )  # fmt: skip
    sim = run(spec)
    remote = sim.clusters["B"].state.topics["A.A-t0"]
    assert remote.overrides.get("retention.ms") == "3600000", remote.overrides
    assert remote.overrides.get("cleanup.policy") == "compact,delete", remote.overrides
    source = sim.clusters["A"].state.topics["A-t0"]
    assert not any(k.startswith("internal.") for k in remote.overrides), remote.overrides
    assert source.overrides.get("retention.ms") == "3600000"
