"""`ccr-admin top`: a cluster's links and their lag, live.

Units: a link's view says a lag only when it is known (an unknown one is
None, never 0), a side that only leads shows no lag, and the largest lag is
taken over the follower partitions. Real daemons, through the CLI: `--once`
prints the link's row and its follower partitions, `--json` one frame whose
lags match describe-link, and the live view prints frames until SIGINT, then
exits 0 without a traceback. Waits are bounded polls.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from typing import Any

from harness import ROOT, _env, run_cli

from admin import AdminClient, Producer
from admin.admin_client import LinkInfo
from admin.top import frame_of, link_view, render

WAIT_S = 60.0
RECORDS = 300


def _info(state: str, mappings: list[dict[str, Any]], partitions: list[dict[str, Any]]
          ) -> LinkInfo:
    return LinkInfo("ab", "id", "B", "A", "a:1", "ASYNC", "local", state, 1_000, 1,
                    mappings, partitions, [])


def _row(partition: int, lag: int, known: bool = True, role: str = "follower",
         leo: int = 0) -> dict[str, Any]:
    return {"topic": "t", "partition": partition, "role": role,
            "lag_records": lag if known else -1, "lag_ms": lag * 10 if known else -1,
            "log_end_offset": leo, "source_high_watermark": leo + lag, "lag_known": known,
            "problem": ""}


FOLLOWS = [{"type": "topic", "local_prefix": "t", "remote_prefix": "t", "leader": "remote"}]
LEADS = [{"type": "topic", "local_prefix": "t", "remote_prefix": "t", "leader": "local"}]


def test_view_takes_the_largest_known_lag_and_never_guesses() -> None:
    view = link_view(_info("CATCHING_UP", FOLLOWS, [_row(0, 5), _row(1, 40), _row(2, 0)]))
    assert (view.max_lag_records, view.max_lag_ms) == (40, 400)
    assert [p.partition for p in view.partitions] == [1, 0, 2]  # most lagging first

    unknown = link_view(_info("CATCHING_UP", FOLLOWS, [_row(0, 5), _row(1, 0, known=False)]))
    assert unknown.max_lag_records is None and unknown.max_lag_ms is None
    assert unknown.partitions[0].lag_records is None  # the unknown one, first

    disconnected = link_view(_info("DISCONNECTED", FOLLOWS, []))
    assert disconnected.max_lag_records is None
    empty = link_view(_info("FOLLOWING", FOLLOWS, []))
    assert (empty.max_lag_records, empty.max_lag_ms) == (0, 0)

    leader = link_view(_info("FOLLOWING", LEADS, [_row(0, 7, role="leader")]))
    assert not leader.follows and leader.max_lag_records is None and leader.partitions == ()
    text = render(frame_of([_info("FOLLOWING", LEADS, [])], 5_000, "b:1"))
    assert "ab    A       ASYNC  FOLLOWING  4s   -" in text


def test_a_followed_partition_without_a_row_has_an_unknown_lag() -> None:
    info = _info("FOLLOWING", FOLLOWS, [_row(0, 0, leo=5)])
    view = link_view(info, {"t": 2, "u": 1, "_t": 1})  # "u" and "_t" are not followed
    assert [(p.topic, p.partition, p.lag_records) for p in view.partitions] == [
        ("t", 1, None), ("t", 0, 0)
    ]
    assert view.max_lag_records is None
    assert link_view(info, {"t": 1}).max_lag_records == 0


def test_render_shows_the_rate_between_frames() -> None:
    first = frame_of([_info("FOLLOWING", FOLLOWS, [_row(0, 0, leo=100)])], 10_000, "b:1")
    second = frame_of([_info("FOLLOWING", FOLLOWS, [_row(0, 0, leo=300)])], 12_000, "b:1")
    lines = render(second, first, 2.0).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("LINK  REMOTE"))
    assert lines[header + 1].split()[-1] == "100"  # 200 records in 2 s
    assert "every 2s (Ctrl-C to quit)" in lines[0]


def _poll(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)  # the poll interval of a bounded wait
    raise AssertionError(f"timed out waiting for {what}")


def _top_json(bootstrap: str) -> dict[str, Any]:
    result = run_cli("top", "--json", bootstrap=bootstrap)
    assert result.returncode == 0, result.stderr
    frame: dict[str, Any] = json.loads(result.stdout)
    return frame


def test_top_on_real_daemons_once_json_and_sigint(daemon_factory: Any) -> None:
    a = daemon_factory("A", extra_args=["--link-session-timeout-ms", "3000"])
    b = daemon_factory("B", extra_args=["--link-session-timeout-ms", "3000"])
    empty = run_cli("top", "--once", bootstrap=b.bootstrap)
    assert empty.returncode == 0 and "no links" in empty.stdout

    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.create_namespace("topic", "orders-")
    admin_a.create_topic("orders-eu", partitions=2)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce("orders-eu", key=f"k{i}", value=f"v{i}")
    assert producer.flush(WAIT_S) == 0
    producer.close()
    admin_a.create_link("ab", b.bootstrap)
    admin_a.attach_namespace("ab", "topic", "orders-", "orders-", "local")

    def caught_up() -> dict[str, Any] | None:
        frame = _top_json(b.bootstrap)
        links = frame["links"]
        if links and links[0]["state"] == "FOLLOWING" and links[0]["max_lag_records"] == 0:
            held = sum(p["log_end_offset"] for p in links[0]["partitions"])
            return frame if held == RECORDS else None
        return None

    frame = _poll("B caught up, as top --json shows it", caught_up)
    (link,) = frame["links"]
    assert link["name"] == "ab" and link["remote_cluster_id"] == "A" and link["follows"]
    assert link["max_lag_ms"] == 0
    described = AdminClient({"bootstrap.servers": b.bootstrap}).describe_link("ab")
    assert sorted((p["topic"], p["partition"], p["lag_records"]) for p in link["partitions"]) == (
        sorted((p["topic"], p["partition"], p["lag_records"]) for p in described.partitions)
    )

    once = run_cli("top", "--once", bootstrap=b.bootstrap)
    assert once.returncode == 0, once.stderr
    lines = once.stdout.splitlines()
    assert lines[0].startswith(f"ccr-admin top  {b.bootstrap}")
    assert any(line.split()[:4] == ["ab", "A", "ASYNC", "FOLLOWING"] for line in lines)
    assert sum(1 for line in lines if line.startswith("ab    orders-eu")) == 2
    leader_side = run_cli("top", "--once", bootstrap=a.bootstrap)
    row = next(line for line in leader_side.stdout.splitlines() if line.startswith("ab "))
    assert row.split()[5:7] == ["-", "-"]  # A only leads: its follower shows the lag

    # The live view: frames until SIGINT, then a clean exit.
    live = subprocess.Popen(
        [sys.executable, "-m", "admin.cli", "--bootstrap", b.bootstrap, "top",
         "--interval", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT), env=_env(),
    )
    try:
        assert live.stdout is not None
        seen = b""
        deadline = time.monotonic() + WAIT_S
        while seen.count(b"ccr-admin top") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([live.stdout], [], [], 0.5)
            if ready:
                chunk = live.stdout.read1(65536)
                assert chunk, f"top ended early: {live.stderr.read() if live.stderr else ''!r}"
                seen += chunk
        assert seen.count(b"ccr-admin top") >= 2, seen
        live.send_signal(signal.SIGINT)
        _out, err = live.communicate(timeout=WAIT_S)
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
    assert live.returncode == 0, err
    assert b"Traceback" not in err and err == b""
