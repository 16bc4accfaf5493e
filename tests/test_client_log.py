"""linkd's log: one JSON object a line, librdkafka's messages of a hosted
mirror link included and rate-limited; describe-link's last error.

Units: `ClientLog` passes at most `limit` messages a window, counts the rest
and says how many when the window ends (by the next message, `tick` or
`flush`), with librdkafka's facility and client as fields. Real daemons: B
hosts a mirror link from A and dials link `ab` to A; once A stops, B's
stderr stays JSON lines, librdkafka's messages in it are few and their
suppressed count is logged, and describe-link (through ccr-admin) carries the
DISCONNECTED link's last error. Waits are bounded polls.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from typing import Any

from harness import free_port, run_cli

from admin import AdminClient, Producer
from linkd.client_log import ClientLog
from linkd.main import JsonFormatter, log_thread_exception

WAIT_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test.client_log.{id(out)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_client_log_passes_a_few_and_counts_the_rest() -> None:
    logger, out = _logger()
    clock = Clock()
    log = ClientLog(logger, {"mirror_link": "mm2"}, limit=3, window_s=10.0, clock=clock)
    for i in range(50):
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", f"refused {i}")
    lines = _lines(out)
    assert [x["msg"] for x in lines] == [f"librdkafka: refused {i}" for i in range(3)]
    assert lines[0]["level"] == "error" and lines[0]["mirror_link"] == "mm2"
    assert lines[0]["rdkafka_facility"] == "FAIL"
    assert lines[0]["rdkafka_client"] == "rdkafka#consumer-1"

    log.tick()  # the window has not ended: nothing yet
    assert len(_lines(out)) == 3
    clock.now += 10.0
    log.tick()
    summary = _lines(out)[-1]
    assert summary["level"] == "warning" and summary["suppressed"] == 47
    assert summary["last"] == "refused 49" and summary["mirror_link"] == "mm2"
    assert "47 more messages suppressed" in summary["msg"]
    assert log.total_suppressed == 47

    # A new window passes messages again; flush says what it suppressed.
    for i in range(5):
        log.log(logging.WARNING, "%s [%s] %s", "FAIL", "rdkafka#producer-2", f"again {i}")
    log.flush()
    tail = _lines(out)[4:]
    assert [x["msg"] for x in tail[:3]] == [f"librdkafka: again {i}" for i in range(3)]
    assert tail[3]["suppressed"] == 2 and len(tail) == 4
    log.flush()  # nothing more to say
    assert len(_lines(out)) == 8
    log.log(logging.INFO, "plain %d", 7)  # any other format is formatted as logging does
    assert _lines(out)[-1]["msg"] == "librdkafka: plain 7"


def test_a_threads_uncaught_exception_is_one_json_line() -> None:
    logger, out = _logger()
    linkd_log = logging.getLogger("linkd")
    saved = linkd_log.handlers, linkd_log.propagate
    linkd_log.handlers, linkd_log.propagate = logger.handlers, False
    try:
        thread = threading.Thread(target=lambda: 1 / 0, name="worker-1")
        before, threading.excepthook = threading.excepthook, log_thread_exception
        try:
            thread.start()
            thread.join(WAIT_S)
        finally:
            threading.excepthook = before
    finally:
        linkd_log.handlers, linkd_log.propagate = saved
    (line,) = _lines(out)
    assert line["msg"] == "thread failed" and line["thread_name"] == "worker-1"
    assert "ZeroDivisionError" in line["exc"]


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


def _poll(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)  # the poll interval of a bounded wait
    raise AssertionError(f"timed out waiting for {what}")


def test_a_stopped_source_gives_json_lines_few_client_messages_and_a_last_error(
    daemon_factory: Any,
) -> None:
    kafka = {alias: f"127.0.0.1:{free_port()}" for alias in ("A", "B")}
    flags = ["--link-session-timeout-ms", "3000"]
    a = daemon_factory("A", extra_args=[*flags, "--kafka-listen", kafka["A"]])
    b = daemon_factory("B", extra_args=[*flags, "--kafka-listen", kafka["B"]])
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.create_namespace("topic", "orders-")
    admin_a.create_topic("orders-eu", partitions=1)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for i in range(10):
        producer.produce("orders-eu", value=f"v{i}")
    assert producer.flush(WAIT_S) == 0
    producer.close()
    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    admin_b.create_namespace("topic", "orders-")
    admin_b.create_link("ba", a.bootstrap)  # B dials A
    admin_b.attach_namespace("ba", "topic", "orders-", "orders-", "remote")
    admin_b.create_mirror_link("mm2", _mm2(kafka["A"], kafka["B"]), alias="B")

    def copied() -> bool:
        links = admin_b.list_mirror_links()
        return bool(links) and sum(
            int(f["stats"].get("records_copied", 0)) for f in links[0].flows) >= 10

    _poll("the mirror link copied A's records", copied)
    _poll("ba FOLLOWING", lambda: admin_b.describe_link("ba").state == "FOLLOWING")
    assert admin_b.describe_link("ba").last_error == ""

    a.terminate()
    stopped_at = time.monotonic()
    described = _poll("ba DISCONNECTED with its last error", lambda: (
        (d := run_cli("describe-link", "ba", "--json", bootstrap=b.bootstrap))
        and d.returncode == 0 and (j := json.loads(d.stdout))["state"] == "DISCONNECTED"
        and j["last_error"] and j))
    assert described["last_error_code"] == "LINK_UNREACHABLE", described
    assert described["last_error_at_ms"] > 0
    text = run_cli("describe-link", "ba", bootstrap=b.bootstrap).stdout
    assert "last error: LINK_UNREACHABLE: " in text, text

    def summarised() -> list[dict[str, Any]] | None:
        lines = [json.loads(line) for line in b.stderr_path.read_text().splitlines()]
        said = [x for x in lines if x.get("suppressed") and x.get("mirror_link") == "mm2"]
        return lines if said and time.monotonic() - stopped_at >= 10 else None

    lines = _poll("a count of suppressed librdkafka messages", summarised)  # every line is JSON
    client = [x for x in lines if str(x["msg"]).startswith("librdkafka: ")]
    assert client and all(x["mirror_link"] == "mm2" for x in client)
    passed = [x for x in client if "rdkafka_facility" in x]
    elapsed_s = time.monotonic() - stopped_at + 30  # the run before A stopped included
    assert len(passed) <= 10 * (elapsed_s / 10 + 1), len(passed)  # at most 10 per 10 s
    raw = [line for line in b.stderr_path.read_text().splitlines() if not line.startswith("{")]
    assert raw == []
