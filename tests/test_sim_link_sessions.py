"""Link sessions in the simulator: the daemon's session rules
(linkd/core/link_auth.py) on every link round of a secure run."""

from __future__ import annotations

from pathlib import Path

import pytest

from linkd.core import link_auth as auth
from sim.runner import run_summary, simulate
from sim.scenario import ScenarioError, parse
from sim.sweep import run_sweep
from sim.sweep_store import read_runs

ROOT = Path(__file__).resolve().parent.parent


def test_the_secure_sweep_runs_clean_with_every_forged_call_refused(tmp_path: Path) -> None:
    """The shipped sweep with security on (sim/sweeps/secure.toml), serially."""
    out = tmp_path / "secure"
    result = run_sweep(ROOT / "sim" / "sweeps" / "secure.toml", None, out, serial=True,
                       progress=False)
    runs = read_runs(out)
    assert len(runs) == 8
    assert runs["error"].isna().all(), runs["error"].dropna().tolist()[:3]
    assert (runs["violation_count"] == 0).all(), runs["violations_json"].tolist()
    assert result.exit_code == 0


def test_a_run_opens_sessions_reopens_them_after_a_crash_and_refuses_forgeries() -> None:
    summary, trace = simulate("secure-links", 1, keep_trace=True)
    assert not summary["violations"]
    assert sum("forge replayed" in t and "replayed call" in t for t in trace) >= 3
    assert sum("forge anonymous" in t and "no session" in t for t in trace) >= 3
    # B's crash ended the sessions it served: a call was refused, a new session opened.
    refused = [t for t in trace if "refused by remote: LINK_AUTHENTICATION_FAILED" in t]
    assert refused
    first_refusal = int(refused[0].split()[0])
    assert any("open-session answer" in t and int(t.split()[0]) > first_refusal for t in trace)


def test_a_session_check_that_lets_calls_through_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker can fail: with verification undone, the replayed calls
    are served and the run reports it."""

    def accept(self: auth.LinkSessions, *args: object) -> auth.Session:
        # Any call, even one without a session, is served as a session's.
        return auth.Session("forged", str(args[1]), "", "", b"", 0)

    monkeypatch.setattr(auth.LinkSessions, "verify", accept)
    summary = run_summary("secure-links", 1)
    broken = [v for v in summary["violations"] if v["invariant"] == "link_calls_unforgeable"]
    assert broken, summary["violations"]


def test_credentials_or_forgeries_without_sessions_are_refused_by_name() -> None:
    base = {"name": "x", "topology": {"clusters": ["A", "B"]}}
    with pytest.raises(ScenarioError, match="link_credentials needs link_sessions"):
        parse({**base, "cluster": {"link_credentials": "s"}})
    with pytest.raises(ScenarioError, match="'forge' needs"):
        parse({**base, "faults": [{"at_ms": 1, "kind": "forge", "node": "A"}]})
