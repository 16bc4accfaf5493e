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
from dataclasses import replace
from typing import Any

from harness import ROOT, _env, free_port, run_cli

from admin import AdminClient, Producer
from admin.admin_client import LinkInfo, MirrorLinkInfo
from admin.top import LinkView, frame_of, link_view, mirror_view, render

WAIT_S = 60.0
RECORDS = 300


def _info(state: str, mappings: list[dict[str, Any]], partitions: list[dict[str, Any]]
          ) -> LinkInfo:
    return LinkInfo("ab", "id", "B", "A", "a:1", "ASYNC", "local", state, 1_000, 1,
                    mappings, partitions, [])


def _row(partition: int, lag: int, known: bool = True, role: str = "follower",
         leo: int = 0, known_at_ms: int = 1_000, problem: str = "") -> dict[str, Any]:
    return {"topic": "t", "partition": partition, "role": role,
            "lag_records": lag if known else -1, "lag_ms": lag * 10 if known else -1,
            "log_end_offset": leo, "source_high_watermark": leo + lag, "lag_known": known,
            "source_hw_known_at_ms": known_at_ms, "problem": problem}


def _view(info: LinkInfo, topics: dict[str, int] | None = None) -> LinkView:
    return link_view(info, topics, at_ms=5_000)


FOLLOWS = [{"type": "topic", "local_prefix": "t", "remote_prefix": "t", "leader": "remote"}]
LEADS = [{"type": "topic", "local_prefix": "t", "remote_prefix": "t", "leader": "local"}]


def test_view_takes_the_largest_known_lag_and_never_guesses() -> None:
    view = _view(_info("CATCHING_UP", FOLLOWS, [_row(0, 5), _row(1, 40), _row(2, 0)]))
    assert (view.max_lag_records, view.max_lag_ms) == (40, 400)
    assert [p.partition for p in view.partitions] == [1, 0, 2]  # most lagging first

    unknown = _view(_info("CATCHING_UP", FOLLOWS, [_row(0, 5), _row(1, 0, known=False)]))
    assert unknown.max_lag_records is None and unknown.max_lag_ms is None
    assert unknown.partitions[0].lag_records is None  # the unknown one, first

    disconnected = _view(_info("DISCONNECTED", FOLLOWS, []))
    assert disconnected.max_lag_records is None
    empty = _view(_info("FOLLOWING", FOLLOWS, []))
    assert (empty.max_lag_records, empty.max_lag_ms) == (0, 0)

    leader = _view(_info("FOLLOWING", LEADS, [_row(0, 7, role="leader")]))
    assert not leader.follows and leader.max_lag_records is None and leader.partitions == ()
    text = render(frame_of([_info("FOLLOWING", LEADS, [])], 5_000, "b:1"))
    assert "ab    A       ASYNC  FOLLOWING  4s   -" in text


def test_a_followed_partition_without_a_row_has_an_unknown_lag() -> None:
    info = _info("FOLLOWING", FOLLOWS, [_row(0, 0, leo=5)])
    view = _view(info, {"t": 2, "u": 1, "_t": 1})  # "u" and "_t" are not followed
    assert [(p.topic, p.partition, p.lag_records) for p in view.partitions] == [
        ("t", 1, None), ("t", 0, 0)
    ]
    assert view.max_lag_records is None
    assert _view(info, {"t": 1}).max_lag_records == 0


def test_problem_says_why() -> None:
    stale = _view(_info("FOLLOWING", FOLLOWS, [
        _row(0, 0, known=False, known_at_ms=2_700),
        _row(1, 0, known=False, problem="UNKNOWN_TOPIC_OR_PARTITION: the source has no t-1"),
        _row(2, 0, known=False, known_at_ms=0),
    ]))
    problems = {p.partition: p.problem for p in stale.partitions}
    assert problems == {
        0: "no fetch round for 2.3 s: lag unknown",
        1: "UNKNOWN_TOPIC_OR_PARTITION: the source has no t-1",  # describe-link's reason, as is
        2: "no fetch round reached it yet: lag unknown",
    }
    assert stale.problem.endswith("(3 partitions)")

    down = _view(_info("DISCONNECTED", FOLLOWS, [_row(0, 0, known=False)]))
    assert down.problem == "disconnected for 4.0 s: lag unknown"
    assert down.partitions[0].problem == "link disconnected: lag unknown"
    assert _view(_info("FOLLOWING", FOLLOWS, [_row(0, 3)])).problem == ""
    erred = replace(_info("DISCONNECTED", FOLLOWS, []), last_error_code="LINK_UNREACHABLE",
                    last_error="link 'ab': Handshake: UNAVAILABLE:\n refused",
                    last_error_at_ms=3_000)
    assert _view(erred).problem == (
        "disconnected for 4.0 s: link 'ab': Handshake: UNAVAILABLE: refused: lag unknown"
    )

    text = render(frame_of([_info("DISCONNECTED", FOLLOWS, [])], 5_000, "b:1"))
    header, row = (line for line in text.splitlines() if line.startswith(("LINK ", "ab ")))
    assert header.split()[-1] == "PROBLEM"
    assert row.endswith("disconnected for 4.0 s: lag unknown")


def _mirror(running: bool, last_error: str = "", error_at: int = 0) -> MirrorLinkInfo:
    flows = [{"flow": "A->B", "replicates": True, "exactly_once": False, "heartbeats": True,
              "checkpoints": True, "sync_group_offsets": False,
              "stats": {"records_copied": 40}}]
    return MirrorLinkInfo("mm2", "B", "", 1, 0, running, last_error, error_at, 2, flows, [], [])


def test_mirror_links_are_listed_with_their_problem() -> None:
    assert mirror_view(_mirror(True), 5_000).problem == ""
    failed = mirror_view(_mirror(False, "KafkaException: all brokers down", 3_000), 5_000)
    assert failed.problem == "engine not running: KafkaException: all brokers down"
    recovered = mirror_view(_mirror(True, "KafkaException: timed out", 3_000), 5_000)
    assert recovered.problem == "engine failed 2.0 s ago: KafkaException: timed out"
    assert mirror_view(_mirror(True, "old", 3_000), 90_000).problem == ""

    text = render(frame_of([], 5_000, "b:1", mirror_links=[_mirror(True)]))
    assert "no links" in text  # no replication link
    header, row = (line for line in text.splitlines() if line.startswith(("MIRROR_LINK", "mm2")))
    assert header.split()[-1] == "PROBLEM"
    assert row.split() == ["mm2", "B", "A->B", "running", "2", "40"]


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


def _mm2(a_kafka: str, b_kafka: str) -> str:
    return "\n".join([
        "clusters = A, B",
        f"A.bootstrap.servers = {a_kafka}",
        f"B.bootstrap.servers = {b_kafka}",
        "A->B.enabled = true",
        "topics = orders.*",
        "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "refresh.topics.interval.seconds = 1",
        "sync.topic.acls.enabled = false",
    ]) + "\n"


def test_top_says_why_and_lists_mirror_links(daemon_factory: Any) -> None:
    kafka = {alias: f"127.0.0.1:{free_port()}" for alias in ("A", "B")}
    flags = ["--link-session-timeout-ms", "3000"]
    a = daemon_factory("A", extra_args=[*flags, "--kafka-listen", kafka["A"]])
    b = daemon_factory("B", extra_args=[*flags, "--kafka-listen", kafka["B"]])
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.create_namespace("topic", "orders-")
    admin_a.create_topic("orders-eu", partitions=1)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for i in range(20):
        producer.produce("orders-eu", key=f"k{i}", value=f"v{i}")
    assert producer.flush(WAIT_S) == 0
    producer.close()
    admin_a.create_link("ab", b.bootstrap)
    admin_a.attach_namespace("ab", "topic", "orders-", "orders-", "local")
    AdminClient({"bootstrap.servers": b.bootstrap}).create_mirror_link(
        "mm2", _mm2(kafka["A"], kafka["B"]), alias="B"
    )

    def healthy() -> dict[str, Any] | None:
        frame = _top_json(b.bootstrap)
        mirrors = frame["mirror_links"]
        links = frame["links"]
        if (links and links[0]["max_lag_records"] == 0 and mirrors
                and mirrors[0]["records_copied"] >= 20):
            return frame
        return None

    frame = _poll("the link caught up and the mirror link copied", healthy)
    assert frame["links"][0]["problem"] == ""
    (mirror,) = frame["mirror_links"]
    assert mirror["name"] == "mm2" and mirror["running"] and mirror["flows"] == ["A->B"]
    once = run_cli("top", "--once", bootstrap=b.bootstrap)
    assert once.returncode == 0, once.stderr
    assert any(line.split()[:4] == ["mm2", "B", "A->B", "running"]
               for line in once.stdout.splitlines()), once.stdout

    a.terminate()  # the source stops: B's link disconnects, its lag becomes unknown

    def disconnected() -> dict[str, Any] | None:
        link = _top_json(b.bootstrap)["links"][0]
        return link if link["state"] == "DISCONNECTED" else None

    link = _poll("B's link DISCONNECTED", disconnected)
    assert link["problem"].startswith("disconnected for "), link["problem"]
    assert link["problem"].endswith("lag unknown")
    assert link["max_lag_records"] is None
    assert [p["problem"] for p in link["partitions"]] == ["link disconnected: lag unknown"]
    text = run_cli("top", "--once", bootstrap=b.bootstrap).stdout
    row = next(line for line in text.splitlines() if line.startswith("ab "))
    assert "disconnected for " in row, text
