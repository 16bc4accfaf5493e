"""Stories for the simulator's script workload, pause fault and the operator
actions attach, detach, recover and reverse, each written as a scenario TOML
file would be and run through the real core (seeded, deterministic)."""

from __future__ import annotations

import tomllib

import pytest

from linkd.core.link_driver import BACKOFF_MIN_MS
from sim import scenario as sc
from sim.world import Simulation


def run(text: str, seed: int = 1) -> Simulation:
    sim = Simulation(sc.parse(tomllib.loads(text)), seed)
    sim.run()
    return sim


def leo(sim: Simulation, cluster: str, topic: str, partition: int = 0) -> int:
    return sim.clusters[cluster].state.partition(topic, partition).log_end_offset


def sends_toml(name: str, cluster: str, topic: str, times: range, partitions: int = 2) -> str:
    rows = ",\n".join(
        f'  {{ at_ms = {t}, cluster = "{cluster}", topic = "{topic}", '
        f'partition = {i % partitions}, value = "{name}-{i}" }}'
        for i, t in enumerate(times)
    )
    return f'[[workloads]]\nkind = "script"\nname = "{name}"\nsends = [\n{rows}\n]\n'


CHAIN = """
name = "story"
[run]
duration_ms = 12000
liveness_ms = 30000
[topology]
kind = "hub"
clusters = ["A", "B"]
[namespace]
topics = 1
partitions = 2
groups = false
"""


def test_script__replays_records_and_transactions__aborted_ones_leave_markers() -> None:
    text = CHAIN + sends_toml("app", "A", "A-t0", range(1000, 3000, 100))
    text += """
[[workloads]]
kind = "script"
name = "txn"
sends = [
  { at_ms = 4000, cluster = "A", topic = "A-t0", partition = 0, value = "t-0", txn = "one" },
  { at_ms = 4000, cluster = "A", topic = "A-t0", partition = 1, value = "t-1", txn = "one" },
  {at_ms=5000, cluster="A", topic="A-t0", partition=0, value="t-2", txn="two", abort=true},
]
"""
    sim = run(text)
    assert sim.violations == []
    ops = sim.history.sends()
    assert sum(1 for o in ops if o.type == "ok") == 20 + 2
    assert [o.value.value for o in ops if o.type == "fail"] == ["t-2"]  # type: ignore[union-attr]
    # 10 records each; the committed transaction adds a record and a marker to
    # each partition, the aborted one a record and a marker to partition 0.
    assert leo(sim, "A", "A-t0", 0) == 10 + 2 + 2
    assert leo(sim, "A", "A-t0", 1) == 10 + 2
    for p in (0, 1):
        assert leo(sim, "B", "A-t0", p) == leo(sim, "A", "A-t0", p)


def test_script__is_validated() -> None:
    bad = CHAIN + sends_toml("app", "Z", "A-t0", range(0, 100, 50))
    with pytest.raises(sc.ScenarioError, match="'Z' is not a cluster"):
        sc.parse(tomllib.loads(bad))
    bad = CHAIN + '[[workloads]]\nkind = "script"\nname = "x"\nsends = [{ at_ms = 1 }]\n'
    with pytest.raises(sc.ScenarioError, match="sends #1"):
        sc.parse(tomllib.loads(bad))


def test_pause__source_stopped__held_writes_land_after_resume__nothing_reset() -> None:
    # A short session timeout: the follower notices the silence (the fetch
    # it had sent to A goes unanswered) and is not FOLLOWING until it is back.
    text = CHAIN + "[cluster]\nsession_timeout_ms = 2000\n"
    text += sends_toml("app", "A", "A-t0", range(1000, 9000, 50))
    text += """
[[faults]]
at_ms = 3000
kind = "pause"
node = "A"
duration_ms = 2500
"""
    sim = run(text)
    assert sim.violations == []
    ops = sim.history.sends()
    # A request to a paused cluster waits (unlike a crash, where it ends info).
    assert all(o.type == "ok" for o in ops), [o for o in ops if o.type != "ok"][:3]
    assert max(o.latency_ms for o in ops) >= 2000
    assert leo(sim, "A", "A-t0", 0) + leo(sim, "A", "A-t0", 1) == len(ops)
    assert leo(sim, "B", "A-t0", 1) == leo(sim, "A", "A-t0", 1)
    crash = run(text.replace('kind = "pause"', 'kind = "crash"'))
    assert any(o.type == "info" for o in crash.history.sends())


def test_pause__is_validated() -> None:
    bad = CHAIN + '[[faults]]\nat_ms = 1\nkind = "pause"\nnode = "A"\npermanent = true\n'
    with pytest.raises(sc.ScenarioError, match="does not apply to kind 'pause'"):
        sc.parse(tomllib.loads(bad))


def test_attach_detach__source_leads_a_new_namespace__follower_copies_then_stops() -> None:
    text = CHAIN + sends_toml("pay", "A", "pay-x", range(3000, 8000, 100), partitions=1)
    text += """
[[actions]]
at_ms = 100
kind = "create_topic"
cluster = "A"
topic = "pay-x"
partitions = 1

[[actions]]
at_ms = 1000
kind = "attach"
cluster = "A"
link = "A-B"
prefixes = [["pay-", "pay-"]]
leader = "local"

[[actions]]
at_ms = 6000
kind = "detach"
cluster = "A"
link = "A-B"
prefixes = [["pay-", ""]]
"""
    sim = run(text)
    assert sim.violations == []
    assert sim.metrics.values.get("actions_failed", 0) == 0
    copied = leo(sim, "B", "pay-x")
    assert 0 < copied < leo(sim, "A", "pay-x") == 50
    with pytest.raises(sc.ScenarioError, match="leader"):
        sc.parse(tomllib.loads(text.replace('leader = "local"', 'leader = "both"')))


DR = """
name = "dr-recover"
[run]
duration_ms = 14000
liveness_ms = 30000
[topology]
kind = "hub"
clusters = ["A", "B", "C"]
[namespace]
topics = 1
partitions = 2
groups = false

[[faults]]
at_ms = 2000
kind = "split"
side_a = ["A"]
side_b = ["B"]

[[faults]]
at_ms = 5000
kind = "crash"
node = "A"
permanent = true

[[actions]]
at_ms = 6000
kind = "failover"
cluster = "B"
link = "A-B"
force = true

[[actions]]
at_ms = 7000
kind = "detach"
cluster = "C"
link = "A-C"
prefixes = [["A-", ""]]

[[actions]]
at_ms = 7000
kind = "create_link"
source = "B"
target = "C"
link = "cb"

[[actions]]
at_ms = 7000
kind = "recover"
cluster = "C"
link = "cb"
prefixes = [["A-", ""]]
"""


def test_recover__c_cuts_what_the_new_leader_never_had__then_follows_it() -> None:
    text = DR + sends_toml("app", "A", "A-t0", range(500, 5000, 20))
    text += sends_toml("app-b", "B", "A-t0", range(6500, 12000, 20))
    sim = run(text)
    assert sim.violations == [], sim.violations
    m = sim.metrics.values
    assert m.get("actions_failed", 0) == 0
    assert m["recoveries"] == 1
    # C was ahead of B (B was cut off at 2 s): the recovery truncated C.
    assert m["records_truncated_by_recovery"] > 0
    for p in (0, 1):
        assert leo(sim, "C", "A-t0", p) == leo(sim, "B", "A-t0", p)
    config = sim.clusters["C"].links.get("cb")
    assert [(m.local_prefix, m.leader) for m in config.attached_mappings()] == [("A-", "remote")]


def test_recover__refused_while_the_remote_is_unreachable() -> None:
    text = DR.replace('at_ms = 7000\nkind = "create_link"', 'at_ms = 6500\nkind = "create_link"')
    text += '[[faults]]\nat_ms = 6900\nkind = "split"\nside_a = ["B"]\nside_b = ["C"]\n'
    text += "duration_ms = 200\n"
    sim = Simulation(sc.parse(tomllib.loads(text)), 1, keep_trace=True)
    sim.run()
    # Describing B's partitions fails: nothing is reserved, cut or attached.
    assert sim.metrics.values["actions_failed"] == 1
    assert any("recover refused: LINK_UNREACHABLE" in line for line in sim.queue.trace)
    assert sim.metrics.values.get("records_truncated_by_recovery", 0) == 0
    assert sim.clusters["C"].links.get("cb").attached_mappings() == []


REVERSE = (
    CHAIN.replace("duration_ms = 12000", "duration_ms = 14000")
    + """
[[actions]]
at_ms = 5000
kind = "reverse"
cluster = "A"
link = "A-B"
"""
)


def test_reverse__b_leads_after_a_waits_for_it__a_follows_b() -> None:
    text = REVERSE + sends_toml("app", "A", "A-t0", range(500, 4900, 20))
    text += sends_toml("app-b", "B", "A-t0", range(7000, 12000, 20))
    text += sends_toml("late-a", "A", "A-t0", range(7000, 7100, 20))
    sim = run(text)
    assert sim.violations == [], sim.violations
    assert sim.metrics.values["reversals"] == 1
    ops = sim.history.sends()
    # After the reversal B accepts writes and A (reserved) refuses them.
    assert all(o.type == "ok" for o in ops if o.process == "app-b")
    assert all(o.type == "fail" for o in ops if o.process == "late-a")
    for p in (0, 1):
        assert leo(sim, "A", "A-t0", p) == leo(sim, "B", "A-t0", p) > 0
    a_view = sim.clusters["A"].links.get("A-B")
    assert [(m.local_prefix, m.leader) for m in a_view.attached_mappings()] == [("A-", "remote")]


def test_reverse__refused_unless_following() -> None:
    text = REVERSE + "[cluster]\nsession_timeout_ms = 1000\n"
    text += '[[faults]]\nat_ms = 3000\nkind = "crash"\nnode = "B"\nduration_ms = 5000\n'
    sim = run(text)
    assert sim.metrics.values["actions_failed"] == 1
    assert sim.metrics.values.get("reversals", 0) == 0


def test_loss_fault__drops_messages_for_a_while__the_link_recovers() -> None:
    text = CHAIN + sends_toml("app", "A", "A-t0", range(500, 9000, 50))
    text += """
[[faults]]
at_ms = 2000
kind = "loss"
side_a = ["A"]
side_b = ["B"]
loss = 0.5
duration_ms = 3000
"""
    sim = run(text)
    assert sim.violations == []
    assert sim.network.dropped > 0
    assert sim.network.params("A", "B").loss == 0.0
    with pytest.raises(sc.ScenarioError, match="loss"):
        sc.parse(tomllib.loads(text.replace("loss = 0.5", "loss = 1.5")))


def test_reset_on_heal__a_healed_cut_reconnects_at_once__instead_of_at_the_deadline() -> None:
    text = CHAIN + sends_toml("app", "A", "A-t0", range(500, 9000, 50))
    text += """
[[faults]]
at_ms = 2000
kind = "one_way"
side_a = ["A"]
side_b = ["B"]
duration_ms = 2000
"""

    def first_answer_after_heal(reset: bool) -> tuple[int, bool]:
        flag = "[network]\nreset_on_heal = true\n" if reset else ""
        sim = Simulation(sc.parse(tomllib.loads(text + flag)), 1, keep_trace=True)
        sim.run()
        assert sim.violations == []
        reset_noted = any("reset by the heal" in line for line in sim.queue.trace)
        answers = [
            int(line.split()[0])
            for line in sim.queue.trace
            if "link A-B" in line and "answer" in line and int(line.split()[0]) >= 4000
        ]
        return answers[0], reset_noted

    slow, noted_without = first_answer_after_heal(False)
    fast, noted_with = first_answer_after_heal(True)
    assert (noted_without, noted_with) == (False, True)
    # Without the reset the follower waits for its fetch's 10 s deadline; with
    # it, the fetch fails at once and the lane backs off its first 100 ms
    # (`link_driver.BACKOFF_MIN_MS`) before it fetches again.
    assert fast < 4000 + BACKOFF_MIN_MS + 50 and slow > 10_000
