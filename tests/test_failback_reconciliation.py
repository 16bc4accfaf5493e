"""failback.reconciliation: where `recover` cuts the cluster that follows
again after a failover (issue 33, choice 2).

`history` (the default) cuts where the two histories part by provenance and
leader epochs; `last-mirrored-offset` (KIP-1279) cuts at the offset where the
remote's copy stopped being copied from this cluster; `last-mirrored-leader-
epoch` (KIP-1279's later proposal) cuts at the end, in this cluster's epoch
history, of the leader epoch of the last record the remote mirrored. Here:
the rule per value on plain histories (rows, reasons, cuts), and a shipped
failback after an unclean election under each value."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from harness import run_cli
from test_core_link_rounds import NOW, two_clusters
from test_fetch_bound_e2e import partition0, plain
from test_links_e2e import cli_json, wait_for
from test_operator_stories_e2e import attach, create_topic, make_cluster, namespaces

from linkd.core import procedures
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.histories import BatchMark, PartitionSide, last_mirrored_offset
from linkd.core.links import POLICIES, FailbackReconciliation, parse_policies
from linkd.core.provenance import ProvenanceItem, ProvenanceKind
from linkd.core.recovery import PartitionRow, plan_partition
from sim import scenario as scenarios
from sim.world import Simulation

HISTORY = FailbackReconciliation.HISTORY
LMO = FailbackReconciliation.LAST_MIRRORED_OFFSET
LMLE = FailbackReconciliation.LAST_MIRRORED_LEADER_EPOCH
BATCHES = tuple(range(0, 150, 10))
TOPIC = "orders-f"
BOUND_S = 60.0  # every batch holds ten records


def _a(epochs: tuple[tuple[int, int], ...]) -> PartitionSide:
    """A, the old source, 150 records, all written by its own clients."""
    return PartitionSide("A", 0, 150, 150, epochs, (), BATCHES)


def _b(
    epochs: tuple[tuple[int, int], ...], marks: tuple[BatchMark, ...] = ()
) -> PartitionSide:
    """B copied A's log up to 80 (the last mirrored offset), failed over
    there (a new epoch) and wrote on to 120."""
    provenance = (
        ProvenanceItem.attached(0, "A", "link", 1),
        ProvenanceItem.detached(80, "link"),
    )
    return PartitionSide("B", 0, 120, 120, epochs, provenance, (), (), marks)


def _mark(base: int, epoch: int) -> BatchMark:
    return BatchMark(base, base + 9, 1000 + base, epoch)


def _row(rule: FailbackReconciliation, a: PartitionSide, b: PartitionSide) -> PartitionRow:
    return plan_partition("t", "t", 0, a, b, None, rule)


# A wrote in epoch 0; B copied [0, 80) and failed over at 80 (its epoch 1);
# then an unclean election on A replaced everything from 60 (A's epoch 1) and
# A's clients wrote on to 150: A's [60, 80) are not the records B holds there.
UNCLEAN_A = ((0, 0), (1, 60))
B_EPOCHS = ((0, 0), (1, 80))


def test_the_policy__is_known__and_a_bad_value_is_refused() -> None:
    assert POLICIES["failback.reconciliation"][0] == "failback_reconciliation"
    fields = parse_policies("ab", {"failback.reconciliation": "last-mirrored-offset"})
    assert fields == {"failback_reconciliation": "last-mirrored-offset"}
    with pytest.raises(ClusterError) as bad:
        parse_policies("ab", {"failback.reconciliation": "lmo"})
    assert bad.value.code is ErrorCode.INVALID_LINK_CONFIG
    assert "'history', 'last-mirrored-offset' or 'last-mirrored-leader-epoch', not 'lmo'" in (
        bad.value.message
    )


def test_alter_link__a_bad_value_is_refused__the_default_is_history() -> None:
    a, _b, _da, _db = two_clusters()
    assert a.links.get("ab").failback_reconciliation is HISTORY
    with pytest.raises(ClusterError, match="not 'newest'"):
        next(procedures.alter_link(a, "ab", {"failback_reconciliation": "newest"}, NOW + 1))
    assert a.links.get("ab").failback_reconciliation is HISTORY


def test_the_last_mirrored_offset__is_where_the_remotes_range_copied_from_here_ends() -> None:
    b = _b(B_EPOCHS)
    assert last_mirrored_offset(b, "A") == 80
    assert last_mirrored_offset(b, "C") is None  # nothing copied from C
    following = PartitionSide("B", 0, 95, 95, B_EPOCHS, b.provenance[:1])
    assert last_mirrored_offset(following, "A") == 95  # still copying: its log end


def test_history__cuts_where_the_unclean_election_rewrote_as() -> None:
    row = _row(HISTORY, _a(UNCLEAN_A), _b(B_EPOCHS, (_mark(70, 0),)))
    assert (row.common_offset, row.truncate_to, row.local_records_lost) == (60, 60, 90)
    assert row.reason == "leader-epoch"  # the history rule's reasons, as before


def test_last_mirrored_offset__keeps_what_the_election_rewrote_below_it() -> None:
    row = _row(LMO, _a(UNCLEAN_A), _b(B_EPOCHS, (_mark(70, 0),)))
    # Cut at 80: A keeps its [60, 80), which B holds other records at.
    assert (row.common_offset, row.truncate_to, row.local_records_lost) == (80, 80, 70)
    assert row.reason == "last-mirrored-offset 80"
    assert row.remote_records_lost == 40  # B's own [80, 120): A follows them


def test_last_mirrored_offset__a_log_that_ends_below_it_is_not_cut() -> None:
    short = PartitionSide("A", 0, 70, 70, UNCLEAN_A, (), BATCHES[:7])
    row = _row(LMO, short, _b(B_EPOCHS))
    assert (row.truncate_to, row.local_records_lost, row.diverged) == (70, 0, False)
    assert row.reason == "last-mirrored-offset 80"


def test_last_mirrored_leader_epoch__ends_where_this_cluster_started_its_next_epoch() -> None:
    row = _row(LMLE, _a(UNCLEAN_A), _b(B_EPOCHS, (_mark(70, 0),)))
    assert (row.common_offset, row.truncate_to, row.local_records_lost) == (60, 60, 90)
    assert row.reason == "last-mirrored-leader-epoch 0 ends at 60 (last mirrored offset 80)"


def test_last_mirrored_leader_epoch__never_past_the_last_mirrored_offset() -> None:
    """No unclean election: A wrote on in the epoch B mirrored last, which
    ends at A's log end; the cut is the last mirrored offset."""
    row = _row(LMLE, _a(((0, 0),)), _b(B_EPOCHS, (_mark(70, 0),)))
    assert (row.truncate_to, row.local_records_lost) == (80, 70)
    assert row.reason == "last-mirrored-leader-epoch 0 ends at 150 (last mirrored offset 80)"


def test_last_mirrored_leader_epoch__without_the_remotes_mark__says_where_its_epoch_came_from() -> (
    None
):
    row = _row(LMLE, _a(UNCLEAN_A), _b(B_EPOCHS))
    assert row.truncate_to == 60
    assert row.reason == (
        "last-mirrored-leader-epoch 0 ends at 60 (last mirrored offset 80; the epoch from B's "
        "epoch history: it marked no batch ending there)"
    )


def test_last_mirrored_leader_epoch__trusts_epoch_numbers__which_an_election_can_reissue() -> None:
    """A wrote [70, ...) in epoch 2 before B stopped at 80; the unclean
    election cut A to 60, below where epoch 2 began, and numbered A's new
    epoch 1 (its highest left, plus one). A's history no longer has epoch 2
    and ends no epoch at or above it: the rule keeps A's rewritten [60, 80).
    The history rule sees the epochs differ at 60."""
    b = _b(((0, 0), (2, 70), (3, 80)), (_mark(70, 2),))
    lmle = _row(LMLE, _a(UNCLEAN_A), b)
    assert (lmle.truncate_to, lmle.local_records_lost) == (80, 70)
    assert lmle.reason == "last-mirrored-leader-epoch 2 ends at 150 (last mirrored offset 80)"
    assert _row(HISTORY, _a(UNCLEAN_A), b).truncate_to == 60


def test_a_remote_that_copied_nothing_from_here__is_cut_by_history__its_row_says_so() -> None:
    """C copied B's log to 50 and wrote on; B never copied from C: no last
    mirrored offset, the history rule's cut (B's log ends at 50), named."""
    b = PartitionSide("B", 0, 50, 50, ((0, 0),))
    c = PartitionSide(
        "C", 0, 60, 60, ((0, 0), (1, 50)), (ProvenanceItem.attached(0, "B", "l", 1),
                                            ProvenanceItem.detached(50, "l")), BATCHES[:6]
    )
    for rule in (LMO, LMLE):
        row = _row(rule, c, b)
        assert (row.truncate_to, row.local_records_lost) == (50, 10), rule
        assert row.reason == (
            "history: log-end (no last mirrored offset: B copied nothing of it from C)"
        ), (rule, row.reason)


# -- the shipped failback after an unclean election ----------------------------------------


def _run(params: dict[str, object], text: str | None = None) -> Simulation:
    spec = scenarios.load("failback-unclean") if text is None else scenarios.parse(
        tomllib.loads(text)
    )
    sim = Simulation(scenarios.apply_params(spec, params), 1, False)
    sim.run()
    return sim


def _cut_and_source(sim: Simulation) -> tuple[tuple[int, int], str]:
    """A's recovery cut (offset, records removed) and whom A copies from now
    ("" when it follows nothing)."""
    entries = sim.clusters["A"].state.topic("A-t0").provenance[0]
    [cut] = [(e.offset, e.removed) for e in entries if e.kind is ProvenanceKind.TRUNCATED]
    last = entries[-1]
    return cut, last.source if last.kind is ProvenanceKind.START else ""


def test_the_shipped_failback__history_and_the_last_mirrored_leader_epoch_are_clean() -> None:
    """B copied A's log to 461 (the last mirrored offset) and failed over;
    A's unclean election took it back to 362 and A's clients wrote on. Both
    rules cut A at 362, where its epoch 1 began, and A follows B: clean."""
    for rule in ("history", "last-mirrored-leader-epoch"):
        sim = _run({"failback_reconciliation": rule})
        assert sim.violations == [], (rule, sim.violations)
        assert _cut_and_source(sim) == ((362, 207), "B"), rule
        a = sim.clusters["A"].state.partition("A-t0", 0)
        b = sim.clusters["B"].state.partition("A-t0", 0)
        assert a.log_end_offset == b.log_end_offset, rule  # A caught up with B


def test_the_shipped_failback__the_last_mirrored_offset_keeps_what_the_election_rewrote() -> (
    None
):
    """Cut at 461, A keeps its own 99 records [362, 461) where B holds A's
    old ones: the judge names each batch ("diverged after failback"), and
    the link's attach refuses to follow B over them (it would cut A's own
    acknowledged records), so A is left reserved, following nothing."""
    sim = _run({"failback_reconciliation": "last-mirrored-offset"})
    assert _cut_and_source(sim) == ((461, 108), "")
    diverged = [v for v in sim.violations if v.invariant == "diverged after failback"]
    assert diverged[0].detail == (
        "recover on link 'A-B' (last-mirrored-offset 461), cut to 461: A:A-t0-0 (source "
        "B:A-t0): the batch at offset 362 differs from the source's (source batch at 362)"
    )
    assert diverged[-1].detail.endswith("... and 94 more")  # 99 batches of one record
    rest = [v for v in sim.violations if v.invariant != "diverged after failback"]
    assert [v.invariant for v in rest] == ["one writer at rest"], rest
    assert "reserved on A and following no link at rest after a recover" in rest[0].detail


def test_the_last_mirrored_leader_epoch__is_fooled_by_an_epoch_number_the_election_reissued() -> (
    None
):
    """A clean leader change on A at 4 s (an election that removes nothing:
    A's epoch 1 from about 400) before B stops copying; the unclean election
    at 7 s cuts A below where epoch 1 began, and the new epoch is numbered 1
    again (the highest left, 0, plus one). B's last mirrored record is of
    A's old epoch 1, which A's history now ends at its log end: the rule
    cuts at the last mirrored offset and keeps the rewritten records, as
    the last mirrored offset does. The history rule is not fooled."""
    text = scenarios.SCENARIO_DIR.joinpath("failback-unclean.toml").read_text()
    text += (
        '\n[[faults]]\nat_ms = 4000\nkind = "unclean_election"\nnode = "A"\n'
        'topic = "A-t0"\npartition = 0\nrecords = 0\n'
    )
    fooled = _run({"failback_reconciliation": "last-mirrored-leader-epoch"}, text)
    assert _cut_and_source(fooled) == ((461, 108), "")
    assert {v.invariant for v in fooled.violations} == {
        "diverged after failback", "one writer at rest"
    }
    history = _run({}, text)
    assert history.violations == []
    assert _cut_and_source(history) == ((362, 207), "B")


def test_unclean_records__sets_the_elections_depth__the_default_run_is_unchanged() -> None:
    """The sweep parameter `unclean_records` sets `records` of every
    unclean_election fault: the shipped 300 gives the shipped run; 100 takes
    back only records A wrote after B stopped copying (above the last
    mirrored offset, 461), so every rule cuts A at 461 and the run is clean.
    A scenario without such a fault, or a negative depth, is refused."""
    base = scenarios.load("failback-unclean")
    assert scenarios.apply_params(base, {"unclean_records": 300}) == base
    deeper = scenarios.apply_params(base, {"unclean_records": 120})
    assert [f.records for f in deeper.faults if f.kind == "unclean_election"] == [120]
    assert [f.duration_ms for f in deeper.faults] == [f.duration_ms for f in base.faults]
    for rule in ("history", "last-mirrored-offset", "last-mirrored-leader-epoch"):
        sim = _run({"failback_reconciliation": rule, "unclean_records": 100})
        assert sim.violations == [], (rule, sim.violations)
        assert _cut_and_source(sim) == ((461, 308), "B"), rule
    with pytest.raises(scenarios.ScenarioError, match="no unclean_election faults"):
        scenarios.apply_params(scenarios.load("retention-gap"), {"unclean_records": 10})
    with pytest.raises(scenarios.ScenarioError, match="must be >= 0"):
        scenarios.apply_params(base, {"unclean_records": -1})


def test_the_last_mirrored_offsets_cut_stays__a_rerun_takes_up_its_journalled_plan() -> None:
    """The operator switches the link to history and runs recover --confirm
    again: the plan journalled past its cut is taken up, its cut (461) is
    the answer, and the attach is refused again."""
    text = scenarios.SCENARIO_DIR.joinpath("failback-unclean.toml").read_text()
    text += (
        '\n[[actions]]\nat_ms = 12000\nkind = "alter_link"\ncluster = "A"\nlink = "A-B"\n'
        'failback_reconciliation = "history"\n'
        '\n[[actions]]\nat_ms = 13000\nkind = "recover"\ncluster = "A"\nlink = "A-B"\n'
        'prefixes = [["A-", "A-"]]\n'
    )
    sim = _run({"failback_reconciliation": "last-mirrored-offset"}, text)
    assert sim.clusters["A"].state.links.get("A-B").failback_reconciliation is HISTORY
    assert _cut_and_source(sim) == ((461, 108), "")
    assert sim.clusters["A"].state.plans.get("A-B") is not None  # still journalled
    assert any(v.invariant == "diverged after failback" for v in sim.violations)


def test_an_operator_sets_the_rule_and_reads_it_in_the_recover_report(daemon_factory: Any) -> None:
    """Through ccr-admin on real daemons: create-link --config (a bad value
    refused), describe-link, a failover on B, then recover's report on A
    names the rule and the last mirrored offset; alter-link sets it back."""
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", on=(a, b))
    bad = run_cli("create-link", "ab", "--remote", b.bootstrap,
                  "--config", "failback.reconciliation=lmo", bootstrap=a.bootstrap)  # fmt: skip
    assert bad.returncode != 0 and "'history', 'last-mirrored-offset' or" in bad.stderr, bad.stderr
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap,
             "--config", "failback.reconciliation=last-mirrored-offset")  # fmt: skip
    shown = run_cli("describe-link", "ab", bootstrap=a.bootstrap).stdout
    assert "failback.reconciliation last-mirrored-offset" in shown, shown
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    create_topic(a, TOPIC, 1)
    plain(a, 3, "before")
    wait_for("B copies A's records",
             lambda: partition0(b).get("log_end_offset") == 3, BOUND_S)  # fmt: skip
    done = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
    assert done.returncode == 0, done.stderr
    report = run_cli("recover", "--link", "ab", bootstrap=a.bootstrap)
    assert report.returncode == 0, report.stderr
    assert "last-mirrored-offset 3" in report.stdout, report.stdout
    back = cli_json(a.bootstrap, "alter-link", "ab", "--failback-reconciliation", "history")
    assert back["failback_reconciliation"] == "history"
