"""`ccr-admin` against a real daemon (and its error paths)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from admin import AdminClient, Producer
from tests.harness import CLI_TIMEOUT_S, Daemon, _env, free_port, run_cli

RECORD_KEYS = {"topic", "partition", "offset", "key", "value", "timestamp", "headers"}


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}; stderr: {result.stderr}"
    return result.stdout


def _json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The failure is one 'error: ...' line on stderr, never a traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def daemon(module_daemon: Daemon) -> Daemon:
    """The module's tests share one daemon: each names its own topics and
    groups. A test that needs a cluster of its own makes one (daemon_factory)."""
    return module_daemon


# ---------------------------------------------------------------------------
# Happy paths
# ---------------------------------------------------------------------------


def test_topic_commands(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it lists every topic
    b = daemon.bootstrap
    out = _ok(
        run_cli(
            "create-topic",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=60000",
            bootstrap=b,
        )
    )
    assert out.strip() == "created topic orders (3 partitions)"
    created = json.loads(_ok(run_cli("create-topic", "payments", "--json", bootstrap=b)))
    assert created["name"] == "payments" and created["partition_count"] == 1

    assert _ok(run_cli("list-topics", bootstrap=b)).split() == ["orders", "payments"]
    listed = json.loads(_ok(run_cli("list-topics", "--json", "--include-internal", bootstrap=b)))
    assert [t["name"] for t in listed] == ["orders", "payments"]

    desc = json.loads(_ok(run_cli("describe-topic", "orders", "--json", bootstrap=b)))
    assert desc["partition_count"] == 3 and desc["configs"]["retention.ms"] == "60000"
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert set(desc["partitions"][0]) >= {
        "log_start_offset",
        "high_watermark",
        "last_stable_offset",
        "log_end_offset",
        "leader_epoch",
    }
    human = _ok(run_cli("describe-topic", "orders", bootstrap=b))
    assert "PARTITION" in human and "retention.ms=60000" in human

    altered = json.loads(
        _ok(
            run_cli(
                "alter-topic-config",
                "orders",
                "--set",
                "retention.ms=1000",
                "--set",
                "message.timestamp.type=LogAppendTime",
                "--json",
                bootstrap=b,
            )
        )
    )
    assert altered["configs"]["retention.ms"] == "1000"
    assert altered["configs"]["message.timestamp.type"] == "LogAppendTime"
    reset = json.loads(
        _ok(
            run_cli(
                "alter-topic-config",
                "orders",
                "--delete",
                "message.timestamp.type",
                "--json",
                bootstrap=b,
            )
        )
    )
    assert reset["configs"]["message.timestamp.type"] == "CreateTime"

    grown = json.loads(
        _ok(run_cli("create-partitions", "orders", "--total", "4", "--json", bootstrap=b))
    )
    assert grown["partition_count"] == 4

    assert _ok(run_cli("delete-topic", "payments", bootstrap=b)).strip() == "deleted topic payments"
    assert _ok(run_cli("list-topics", bootstrap=b)).split() == ["orders"]


def test_produce_stdin_then_consume_json(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "orders", "--partitions", "3", bootstrap=b))
    lines = "".join(f"key-{i}:value {i}\n" for i in range(9))
    out = _ok(
        run_cli(
            "produce",
            "orders",
            "--key-separator",
            ":",
            "--header",
            "src=cli",
            "--header",
            "v=1",
            input=lines,
            bootstrap=b,
        )
    )
    assert out.strip() == "produced 9 records to orders"

    acks = _json_lines(
        _ok(
            run_cli(
                "produce",
                "orders",
                "--json",
                "--partition",
                "2",
                input="plain-a\nplain-b\n",
                bootstrap=b,
            )
        )
    )
    assert [set(a) for a in acks] == [{"topic", "partition", "offset"}] * 2
    assert [a["partition"] for a in acks] == [2, 2]
    assert acks[1]["offset"] == acks[0]["offset"] + 1

    records = _json_lines(
        _ok(
            run_cli(
                "consume",
                "orders",
                "--from-beginning",
                "--json",
                "--timeout-ms",
                "1500",
                bootstrap=b,
            )
        )
    )
    assert len(records) == 11
    for rec in records:
        assert set(rec) == RECORD_KEYS
        assert rec["topic"] == "orders"
        assert isinstance(rec["timestamp"], int) and rec["timestamp"] > 0
    keyed = {r["key"]: r for r in records if r["key"] is not None}
    assert sorted(keyed) == [f"key-{i}" for i in range(9)]
    for i in range(9):
        rec = keyed[f"key-{i}"]
        assert rec["value"] == f"value {i}"
        assert rec["headers"] == [["src", "cli"], ["v", "1"]]
    plain = [r for r in records if r["key"] is None]
    assert [(r["partition"], r["offset"], r["value"]) for r in plain] == [
        (2, acks[0]["offset"], "plain-a"),
        (2, acks[1]["offset"], "plain-b"),
    ]
    assert all(r["headers"] == [] for r in plain)
    # Offsets are unique per partition and dense from 0.
    for p in range(3):
        offsets = sorted(r["offset"] for r in records if r["partition"] == p)
        assert offsets == list(range(len(offsets)))

    # The same records through the library agree on placement.
    with AdminClient(b) as admin:
        hw = {p.partition: p.high_watermark for p in admin.describe_topic("orders").partitions}
    assert sum(hw.values()) == 11

    limited = _json_lines(
        _ok(
            run_cli(
                "consume",
                "orders",
                "--from-beginning",
                "--json",
                "--max-messages",
                "4",
                "--partition",
                "2",
                bootstrap=b,
            )
        )
    )
    assert len(limited) == 4 and {r["partition"] for r in limited} == {2}

    text = _ok(
        run_cli(
            "consume",
            "orders",
            "--from-beginning",
            "--partition",
            "2",
            "--timeout-ms",
            "1000",
            bootstrap=b,
        )
    )
    assert "plain-a" in text.splitlines()


def test_consume_binary_values_are_base64(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "bin", bootstrap=b))
    producer = Producer(b)
    producer.produce("bin", key=b"\xff\xfe", value=b"\x00\x80bin", headers=[("h", b"\xc3")])
    producer.produce("bin", key=None, value=None)
    assert producer.flush(10) == 0
    producer.close()
    records = _json_lines(
        _ok(
            run_cli(
                "consume", "bin", "--from-beginning", "--json", "--max-messages", "2", bootstrap=b
            )
        )
    )
    assert records[0]["key"] == {"base64": base64.b64encode(b"\xff\xfe").decode()}
    assert records[0]["value"] == {"base64": base64.b64encode(b"\x00\x80bin").decode()}
    assert records[0]["headers"] == [["h", {"base64": base64.b64encode(b"\xc3").decode()}]]
    assert records[1]["key"] is None and records[1]["value"] is None


def test_produce_binary_stdin_and_acks_zero(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "raw", bootstrap=b))
    out = _ok(run_cli("produce", "raw", "--acks", "0", input=b"\xffraw\r\nnext\n", bootstrap=b))
    assert out.strip() == "produced 2 records to raw"
    records = _json_lines(
        _ok(
            run_cli(
                "consume", "raw", "--from-beginning", "--json", "--max-messages", "2", bootstrap=b
            )
        )
    )
    assert records[0]["value"] == {"base64": base64.b64encode(b"\xffraw").decode()}
    assert records[1]["value"] == "next"


def test_consume_with_group_commits_and_describe_group(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "jobs", "--partitions", "2", bootstrap=b))
    _ok(run_cli("produce", "jobs", input="".join(f"j{i}\n" for i in range(6)), bootstrap=b))
    first = _json_lines(
        _ok(
            run_cli(
                "consume",
                "jobs",
                "--group",
                "g1",
                "--from-beginning",
                "--json",
                "--timeout-ms",
                "1500",
                bootstrap=b,
            )
        )
    )
    assert len(first) == 6
    # Committed: a second run of the group sees nothing new.
    again = _json_lines(
        _ok(
            run_cli(
                "consume",
                "jobs",
                "--group",
                "g1",
                "--from-beginning",
                "--json",
                "--timeout-ms",
                "1000",
                bootstrap=b,
            )
        )
    )
    assert again == []

    group = json.loads(_ok(run_cli("describe-group", "g1", "--json", bootstrap=b)))
    assert group["group_id"] == "g1" and group["state"] == "Empty"
    assert group["members"] == []
    by_part = {o["partition"]: o for o in group["offsets"]}
    with AdminClient(b) as admin:
        hws = {p.partition: p.high_watermark for p in admin.describe_topic("jobs").partitions}
    for p, hw in hws.items():
        if hw:
            assert by_part[p]["committed"] == hw and by_part[p]["lag"] == 0

    _ok(run_cli("produce", "jobs", "--partition", "0", input="late\n", bootstrap=b))
    group = json.loads(_ok(run_cli("describe-group", "g1", "--json", bootstrap=b)))
    lag0 = {o["partition"]: o["lag"] for o in group["offsets"]}
    assert lag0[0] == 1
    human = _ok(run_cli("describe-group", "g1", bootstrap=b))
    assert "LAG" in human and "Empty" in human

    groups = json.loads(_ok(run_cli("list-groups", "--json", bootstrap=b)))
    assert {"group_id": "g1", "state": "Empty", "protocol_type": "consumer"} in groups
    assert "g1" in _ok(run_cli("list-groups", bootstrap=b))


def test_consume_read_committed_hides_aborted(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "tx", bootstrap=b))
    producer = Producer({"bootstrap.servers": b, "transactional.id": "cli-tx"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("tx", value=b"aborted")
    assert producer.flush(20) == 0  # written, then aborted
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce("tx", value=b"committed")
    producer.commit_transaction(20)
    producer.close()
    committed = _json_lines(
        _ok(
            run_cli(
                "consume",
                "tx",
                "--from-beginning",
                "--json",
                "--isolation",
                "read_committed",
                "--timeout-ms",
                "1000",
                bootstrap=b,
            )
        )
    )
    assert [r["value"] for r in committed] == ["committed"]
    everything = _json_lines(
        _ok(
            run_cli(
                "consume", "tx", "--from-beginning", "--json", "--timeout-ms", "1000", bootstrap=b
            )
        )
    )
    assert [r["value"] for r in everything] == ["aborted", "committed"]


def test_health_describe_cluster_and_env_bootstrap(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it counts the topics
    health = json.loads(_ok(run_cli("health", "--json", bootstrap=daemon.bootstrap)))
    assert health["status"] == "SERVING" and health["cluster_id"] == "test"
    text = _ok(run_cli("health", env={"CCR_BOOTSTRAP": daemon.bootstrap}))
    assert "SERVING" in text
    info = json.loads(_ok(run_cli("describe-cluster", "--json", bootstrap=daemon.bootstrap)))
    assert info["cluster_id"] == "test" and info["topic_count"] == 0
    assert "cluster_id: test" in _ok(run_cli("describe-cluster", bootstrap=daemon.bootstrap))


def test_health_wait__asked_before_the_daemon_starts__answers_once_it_serves(
    daemon_factory: Callable[..., Daemon],
) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "admin.cli", "--bootstrap", f"127.0.0.1:{port}"]
    waiting = subprocess.Popen(
        [*cmd, "health", "--wait", "60", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        daemon_factory("late", port=port)
        out, err = waiting.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, err
    assert json.loads(out)["cluster_id"] == "late"


def test_health_wait__nothing_listening__fails_after_the_wait_naming_the_address() -> None:
    port = free_port()
    line = _one_line_error(run_cli("health", "--wait", "0.3", bootstrap=f"127.0.0.1:{port}"))
    assert line.startswith("error: UNAVAILABLE") and f"127.0.0.1:{port}" in line


def test_empty_stdin_produces_nothing(daemon: Daemon) -> None:
    _ok(run_cli("create-topic", "quiet", bootstrap=daemon.bootstrap))
    out = _ok(run_cli("produce", "quiet", input="", bootstrap=daemon.bootstrap))
    assert out.strip() == "produced 0 records to quiet"
    out = _ok(run_cli("consume", "quiet", "--timeout-ms", "300", bootstrap=daemon.bootstrap))
    assert out == ""


# ---------------------------------------------------------------------------
# Error paths: non-zero exit, one line, no traceback
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (("describe-topic", "nope"), None, "error: UNKNOWN_TOPIC: topic 'nope' does not exist"),
        (("delete-topic", "nope"), None, "error: UNKNOWN_TOPIC:"),
        (("produce", "nope"), "x\n", "error: UNKNOWN_TOPIC:"),
        (("consume", "nope"), None, "error: UNKNOWN_TOPIC:"),
        (("alter-topic-config", "nope", "--set", "retention.ms=1"), None, "error: UNKNOWN_TOPIC:"),
        (("create-topic", "exists"), None, "error: TOPIC_ALREADY_EXISTS:"),
        (("create-topic", "bad name"), None, "error: INVALID_TOPIC_NAME:"),
        (("alter-topic-config", "exists", "--set", "bogus=1"), None, "error: INVALID_CONFIG:"),
        (("create-topic", "t2", "--config", "retention.ms=abc"), None, "error: INVALID_CONFIG:"),
        (("create-partitions", "exists", "--total", "1"), None, "error: INVALID_PARTITIONS:"),
        (("produce", "exists", "--partition", "5"), "x\n", "error: UNKNOWN_PARTITION:"),
        (("consume", "exists", "--partition", "5"), None, "error: UNKNOWN_PARTITION:"),
        (("produce", "exists", "--key-separator", ":"), "no-separator\n", "error: line 1 has no"),
        (("alter-topic-config", "exists"), None, "error: alter-topic-config needs"),
        (("describe-group", "ghost"), None, "error: GROUP_ID_NOT_FOUND:"),
    ],
)
def test_cli_errors_one_line(
    daemon: Daemon, args: tuple[str, ...], stdin: str | None, expected: str
) -> None:
    # The module's daemon serves every case: each is refused and changes nothing.
    with AdminClient(daemon.bootstrap) as admin:
        if "exists" not in {t.name for t in admin.list_topics()}:
            admin.create_topic("exists")
    result = run_cli(*args, input=stdin, bootstrap=daemon.bootstrap)
    line = _one_line_error(result)
    assert line.startswith(expected), line


def test_produce_failure_exits_nonzero(daemon: Daemon) -> None:
    with AdminClient(daemon.bootstrap) as admin:
        admin.create_topic("tiny", 1, {"max.message.bytes": 1000})
    result = run_cli(
        "produce", "tiny", input="ok\n" + "x" * 3000 + "\n", bootstrap=daemon.bootstrap
    )
    line = _one_line_error(result)
    assert line.startswith("error: RECORD_TOO_LARGE:") and "1 of 2 records failed" in line


def test_cli_unreachable_cluster() -> None:
    port = free_port()  # nothing listens there
    for args in (
        ("health",),
        ("list-topics",),
        ("describe-topic", "x"),
        ("consume", "x"),
        ("produce", "x"),
    ):
        result = run_cli(*args, input="a\n", bootstrap=f"127.0.0.1:{port}")
        line = _one_line_error(result)
        assert line.startswith(f"error: UNAVAILABLE: cannot reach cluster at 127.0.0.1:{port}")


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("no-such-command",),
        ("--bootstrap", "nohost", "health"),
        ("--bootstrap", "host:99999", "health"),
        ("--timeout", "0", "health"),
        ("create-topic",),
        ("create-topic", "t", "--partitions", "0"),
        ("create-topic", "t", "--partitions", "x"),
        ("create-topic", "t", "--config", "novalue"),
        ("produce", "t", "--acks", "2"),
        ("consume", "t", "--isolation", "serializable"),
        ("consume", "t", "--max-messages", "0"),
        ("create-partitions", "t"),
    ],
)
def test_cli_bad_arguments_exit_2(args: tuple[str, ...]) -> None:
    result = run_cli(*args, bootstrap=None)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "usage:" in result.stderr and "Traceback" not in result.stderr


def test_cli_help_exits_0() -> None:
    result = run_cli("--help", process=True)
    assert result.returncode == 0 and "create-topic" in result.stdout
    result = run_cli("consume", "--help")
    assert result.returncode == 0 and "--from-beginning" in result.stdout


def test_consume_fails_when_cluster_goes_away(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it kills the daemon
    import threading

    _ok(run_cli("create-topic", "gone", bootstrap=daemon.bootstrap))
    results: list[subprocess.CompletedProcess[str]] = []
    worker = threading.Thread(
        target=lambda: results.append(
            run_cli("consume", "gone", "--timeout-ms", "4000", bootstrap=daemon.bootstrap)
        )
    )
    worker.start()
    # Kill the daemon while the consumer runs (if it is not started yet, its first
    # call fails the same way).
    worker.join(1.5)
    daemon.kill9()
    worker.join(60)
    (result,) = results
    line = _one_line_error(result)
    assert line.startswith("error: UNAVAILABLE: cannot reach cluster at")


# ---------------------------------------------------------------------------
# The suite runs the CLI's main in its own process (tests/harness.py run_cli):
# the console script answers the same, stream for stream.
# ---------------------------------------------------------------------------


def test_cli_in_process_answers_as_the_console_script(daemon: Daemon) -> None:
    b = daemon.bootstrap
    _ok(run_cli("create-topic", "twin", "--partitions", "2", bootstrap=b, process=True))
    calls: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--bootstrap", b, "describe-topic", "twin", "--json"), {}),
        (("--bootstrap", b, "describe-topic", "missing"), {}),  # exit 1, one line on stderr
        (("--bootstrap", b, "produce", "twin", "--partition", "1"),
         {"input": b"\xffraw\r\nnext\n"}),  # raw bytes on stdin
        (("--bootstrap", b, "consume", "twin", "--partition", "1", "--from-beginning",
          "--json", "--max-messages", "2"), {}),  # records on stdout, the count on stderr
        (("create-topic", "t", "--partitions", "0"), {}),  # exit 2, argparse's usage
        (("consume", "--help"), {}),  # exit 0, help on stdout
        (("list-topics",), {"env": {"CCR_BOOTSTRAP": b}}),  # the bootstrap from the environment
    ]
    for args, kwargs in calls:
        here = run_cli(*args, **kwargs)
        there = run_cli(*args, **kwargs, process=True)
        assert (here.returncode, here.stdout, here.stderr) == (
            there.returncode,
            there.stdout,
            there.stderr,
        ), args
    assert os.environ.get("CCR_BOOTSTRAP") != b  # the call's environment was taken back
