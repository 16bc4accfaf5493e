"""The metric glossary (sim/glossary.py): every metric name the simulator's
source sets has an entry (tests/test_sim_pinned_digests.py checks the names
every shipped scenario's pinned runs emit), the printed sweep table explains
its columns and its "-", and docs/simulator.md carries the current table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim import cli, glossary

ROOT = Path(__file__).resolve().parent.parent


def test_every_metric_name_in_the_simulator_source_has_an_entry() -> None:
    """Names set on rare paths (drawn moves, reversals) too: every literal or
    f-string name passed to Metrics.add/set/maximum, with `{...}` read as a
    placeholder."""
    call = re.compile(r"metrics\.(?:add|set|maximum)\(\s*(f?)\"([^\"]+)\"")
    names: set[str] = set()
    for path in sorted((ROOT / "sim").glob("*.py")):
        for is_f, name in call.findall(path.read_text()):
            names.add(re.sub(r"\{[^}]*\}", "X", name) if is_f else name)
    assert len(names) > 20
    assert glossary.unknown(names) == []


def test_lookup_prefers_exact_then_the_most_specific_pattern() -> None:
    assert glossary.describe("mirror_duplicates_stored").name == "mirror_duplicates_stored"
    assert glossary.describe("mirror_polls").name == "mirror_<counter>"
    assert glossary.describe("link_state_ms_IN_SYNC").name == "link_state_ms_<STATE>"
    assert glossary.describe("availability_<class>").name == "availability_<class>"
    assert glossary.lookup("no_such_metric") is None
    with pytest.raises(KeyError, match="no_such_metric"):
        glossary.describe("no_such_metric")
    assert "expected value" in glossary.explain("availability_target_producer")
    assert glossary.split_column("produce_latency_p99_ms_p50") == ("produce_latency_p99_ms", "p50")
    assert glossary.split_column("runs_with_errors") is None


def test_legend_explains_columns_and_dashes() -> None:
    lines = glossary.column_legend(
        ["runs", "rpo_records_max", "availability_target_producer_mean"],
        missing=["rpo_records_max"],
    )
    assert lines[0].startswith("columns")
    assert lines[1].split()[:4] == ["rpo_records_max", "max", "of", "rpo_records"]
    dash = lines.index('"-": no run of the group reported the metric, because')
    assert lines[dash + 1].split()[0] == "rpo_records_max"
    assert "no failover" in lines[dash + 1]
    assert len(lines) == dash + 2


def test_docs_hold_the_current_table() -> None:
    docs = (ROOT / "docs" / "simulator.md").read_text()
    assert glossary.markdown_table() in docs, (
        "docs/simulator.md's glossary is stale: paste `ccr-sim glossary --markdown`"
    )


def test_cli_glossary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["glossary", "rpo_ms", "io_bytes_produce"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rpo_ms  [ms (virtual)]") and "io_bytes_<class>" in out
    assert cli.main(["glossary", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == glossary.markdown_table()
    assert cli.main(["glossary", "bogus_metric"]) == 2
    assert "bogus_metric" in capsys.readouterr().err
