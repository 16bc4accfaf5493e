"""`linkd --metrics-listen`: the metrics real daemons expose while a link catches up.

Stories: A holds a backlog before the link to B exists; once the namespace is
attached, B's scrapes show the follower partition's lag known and above 0,
falling round by round, reaching 0, with the link FOLLOWING (1 on that state's
series, 0 on every other) and the records-replicated counter equal to the
records A holds; the lag series agree with describe-link. A metrics address
already in use stops the daemon at start with exit 3 naming it. Every family
the daemon exposes is documented in docs/metrics.md, and nothing else is.
Waits are bounded polls of the scrape.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic
from harness import Daemon, free_port, run_cli
from prometheus_client.parser import text_string_to_metric_families

from admin import AdminClient, Producer
from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd.grpc_service import VERSION
from linkd.main import load_settings

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 60.0
LINK_FLAGS = ["--link-session-timeout-ms", "3000"]
# The backlog: many more bytes than one fetch round copies of a partition
# (1 MiB), so catching up takes many rounds and the scrapes see the lag fall.
BACKLOG_RECORDS = 1200
VALUE_BYTES = 16 * 1024


Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape_text(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        assert resp.status == 200
        return str(resp.read().decode())


def scrape(address: str) -> Samples:
    """Sample name -> [(labels, value)]."""
    out: Samples = {}
    for family in text_string_to_metric_families(scrape_text(address)):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    for got, v in samples.get(name, []):
        if all(got.get(k) == want for k, want in labels.items()):
            return v
    return None


def poll(
    what: str, check: Callable[[], Any], timeout_s: float = WAIT_S, interval_s: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)  # the poll interval of a bounded wait
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def cli_ok(bootstrap: str, *args: str) -> str:
    result = run_cli(*args, bootstrap=bootstrap)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return result.stdout


def test_scrapes_follow_a_link_catching_up(daemon_factory: Any) -> None:
    metrics_a, metrics_b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = daemon_factory("A", extra_args=[*LINK_FLAGS, "--metrics-listen", metrics_a])
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, "--metrics-listen", metrics_b])
    cli_ok(a.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    AdminClient({"bootstrap.servers": a.bootstrap}).create_topic("orders-m", partitions=1)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    payload = b"x" * VALUE_BYTES
    for i in range(BACKLOG_RECORDS):
        producer.produce("orders-m", key=f"k{i}", value=payload)
    assert producer.flush(WAIT_S) == 0
    producer.close()

    # No link yet: the families are there, with no link series.
    before = scrape(metrics_b)
    assert "ccr_link_state" not in before

    cli_ok(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    # The attach runs beside the scrapes, so they watch from the moment the
    # link starts to copy: a CLI's start and exit under load can outlast the
    # whole catch-up, which left a scrape of only its last round.
    attached: list[Any] = []
    attach = threading.Thread(target=lambda: attached.append(run_cli(
        "attach-namespace", "--link", "ab", "--type", "topic",
        "--local-prefix", "orders-", "--remote-prefix", "orders-", "--leader", "local",
        bootstrap=a.bootstrap)))
    attach.start()

    lags: list[float] = []
    max_lags: list[float] = []
    where = {"link": "ab", "topic": "orders-m", "partition": "0"}

    def caught_up() -> Samples | None:
        samples = scrape(metrics_b)
        lag = value(samples, "ccr_link_partition_lag_records", **where)
        if lag is not None:
            lags.append(lag)
            lag_ms = value(samples, "ccr_link_partition_lag_ms", **where)
            assert lag_ms is not None and lag_ms >= 0
            top = value(samples, "ccr_link_max_lag_records", link="ab")
            if top is not None:
                max_lags.append(top)
                assert top >= lag or top == 0  # the scrape is one snapshot: MaxLag >= lag
        following = value(samples, "ccr_link_state", link="ab", state="FOLLOWING")
        return samples if lag == 0 and following == 1 else None

    final = poll("B's lag to reach 0 while FOLLOWING", caught_up, interval_s=0.01)
    attach.join(WAIT_S)
    assert attached and attached[0].returncode == 0, f"attach-namespace: {attached}"

    assert lags[0] > 0, f"the first known lag should be the backlog's, not {lags[0]}"
    assert lags == sorted(lags, reverse=True), f"the lag never rises without new records: {lags}"
    assert len(set(lags)) >= 3, f"the lag should be seen falling, not only {sorted(set(lags))}"
    assert lags[-1] == 0
    assert max_lags and max_lags[-1] == 0
    assert value(final, "ccr_link_max_lag_ms", link="ab") == 0
    assert value(final, "ccr_link_partition_lag_ms", **where) == 0
    states = {labels["state"]: v for labels, v in final["ccr_link_state"]
              if labels["link"] == "ab"}
    assert states == {
        "DISCONNECTED": 0, "CATCHING_UP": 0, "FOLLOWING": 1,
        "SYNCING": 0, "IN_SYNC": 0, "OUT_OF_SYNC": 0,
    }
    assert value(final, "ccr_link_replicated_records_total", link="ab") == BACKLOG_RECORDS
    # B's one follower partition is copying; A leads it and sees no lag.
    partition_states = {labels["state"]: v for labels, v in final["ccr_link_mirror_partitions"]
                        if labels["link"] == "ab"}
    assert partition_states == {
        "copying": 1, "lag_unknown": 0, "refused": 0, "diverged": 0, "stopped": 0,
    }
    leading = poll("A to see its follower caught up", lambda: (
        (s := scrape(metrics_a)) and value(
            s, "ccr_link_leader_partition_lag_records", **where) == 0 and s))
    assert value(leading, "ccr_link_leader_partition_lag_ms", **where) == 0
    assert "ccr_link_mirror_partitions" not in leading  # A follows nothing on ab
    assert value(final, "ccr_link_leader_partition_lag_records", **where) is None
    replicated_bytes = value(final, "ccr_link_replicated_bytes_total", link="ab")
    assert replicated_bytes is not None and replicated_bytes > BACKLOG_RECORDS * VALUE_BYTES
    assert value(final, "ccr_link_truncations_total", link="ab") == 0
    rounds = value(final, "ccr_link_fetch_rounds_total", link="ab")
    assert rounds is not None and rounds >= len(set(lags)) - 1
    assert value(final, "ccr_link_fetch_round_seconds_count", link="ab") == rounds

    # The same truth as describe-link: B's partition holds the backlog.
    described = AdminClient({"bootstrap.servers": b.bootstrap}).describe_link("ab")
    rows = [p for p in described.partitions if p["topic"] == "orders-m"]
    assert [(p["lag_records"], p["log_end_offset"]) for p in rows] == [(0, BACKLOG_RECORDS)]
    # Replicated records are no produce requests: B's clients wrote nothing.
    assert value(final, "ccr_produce_records_total", listener="grpc") is None
    assert value(scrape(metrics_a), "ccr_produce_records_total", listener="grpc") == (
        BACKLOG_RECORDS
    )

    # SYNC: A's acks=all produces wait for B's acknowledgement, observed per link.
    cli_ok(a.bootstrap, "set-mode", "--link", "ab", "sync")
    poll("A's side of ab IN_SYNC", lambda: value(
        scrape(metrics_a), "ccr_link_state", link="ab", state="IN_SYNC") == 1)
    assert value(scrape(metrics_a), "ccr_link_sync_ack_seconds_count", link="ab") is None
    producer = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(3):
        producer.produce("orders-m", value=f"sync-{i}")
        assert producer.flush(WAIT_S) == 0
    producer.close()
    acked = value(scrape(metrics_a), "ccr_link_sync_ack_seconds_count", link="ab")
    assert acked == 3, acked  # one acks=all request per flush
    poll("B's counter to take the 3 records", lambda: value(
        scrape(metrics_b), "ccr_link_replicated_records_total", link="ab"
    ) == BACKLOG_RECORDS + 3)


def test_build_info_link_errors_and_refused_sessions(daemon_factory: Any) -> None:
    metrics_a, metrics_b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = daemon_factory("A", extra_args=[*LINK_FLAGS, "--metrics-listen", metrics_a])
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, "--metrics-listen", metrics_b])
    samples = scrape(metrics_a)
    ((labels, one),) = samples["ccr_build_info"]
    assert one == 1 and labels["version"] == VERSION and labels["python"]

    # A call of the link service without a session: B refuses it, and counts it.
    channel = grpc.insecure_channel(b.bootstrap)
    try:
        with pytest.raises(grpc.RpcError):
            replication_pb2_grpc.ReplicationStub(channel).Handshake(
                replication_pb2.HandshakeRequest(), timeout=WAIT_S
            )
    finally:
        channel.close()
    assert value(scrape(metrics_b), "ccr_link_sessions_refused_total", reason="no session") == 1

    # A dials the link; once B is gone its calls fail and are counted by code.
    cli_ok(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    poll("ab connected on A", lambda: value(
        scrape(metrics_a), "ccr_link_state", link="ab", state="DISCONNECTED") == 0)
    assert "ccr_link_errors_total" not in scrape(metrics_a)
    b.terminate()
    failed = poll("A's failed calls of ab counted", lambda: (
        (s := scrape(metrics_a)) and s.get("ccr_link_errors_total") and s))
    codes = {labels["code"]: v for labels, v in failed["ccr_link_errors_total"]
             if labels["link"] == "ab"}
    assert codes and all(v >= 1 for v in codes.values()), codes
    assert "LINK_UNREACHABLE" in codes, codes


def test_cluster_request_metrics_count_produce_and_fetch(daemon_factory: Any) -> None:
    address = f"127.0.0.1:{free_port()}"
    kafka = f"127.0.0.1:{free_port()}"
    d = daemon_factory("A", extra_args=["--metrics-listen", address, "--kafka-listen", kafka])
    cli_ok(d.bootstrap, "create-topic", "t", "--partitions", "1")
    producer = Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 50})
    for i in range(10):
        producer.produce("t", value=f"v{i}")
    assert producer.flush(WAIT_S) == 0
    producer.close()
    kp = KafkaProducer({"bootstrap.servers": kafka, "linger.ms": 50})
    for i in range(5):
        kp.produce("t", value=f"k{i}".encode())
    assert kp.flush(WAIT_S) == 0
    kc = KafkaConsumer({"bootstrap.servers": kafka, "group.id": "g"})
    kc.assign([TopicPartition("t", 0, 0)])
    got = 0
    deadline = time.monotonic() + WAIT_S
    while got < 15 and time.monotonic() < deadline:
        got += sum(1 for m in kc.consume(100, 0.5) if m.error() is None)
    kc.close()
    assert got == 15
    samples = scrape(address)
    assert value(samples, "ccr_produce_records_total", listener="grpc") == 10
    assert value(samples, "ccr_produce_records_total", listener="kafka") == 5
    grpc_requests = value(samples, "ccr_produce_requests_total", listener="grpc")
    assert grpc_requests is not None and grpc_requests >= 1
    assert value(samples, "ccr_produce_request_seconds_count", listener="grpc") == grpc_requests
    fetched = value(samples, "ccr_fetch_records_total", listener="kafka")
    assert fetched is not None and fetched >= 15
    assert (value(samples, "ccr_fetch_bytes_total", listener="kafka") or 0) > 0


def test_metrics_address_in_use_is_a_startup_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        d = Daemon("A", tmp_path / "a" / "data", extra_args=["--metrics-listen", address])
        d.start()
        assert d.proc is not None
        code = d.proc.wait(timeout=WAIT_S)
    assert code == 3
    assert f"cannot serve metrics on {address}" in d.stderr_path.read_text()


@pytest.mark.parametrize(
    ("address", "words"),
    [("nowhere", "'nowhere' is not HOST:PORT"), (":9100", "':9100' is not HOST:PORT"),
     ("127.0.0.1:http", "'127.0.0.1:http': the port must be a number"),
     ("127.0.0.1:70000", "'127.0.0.1:70000': the port must be a number")],
)
def test_a_bad_metrics_address_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], address: str, words: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load_settings(["--cluster-id", "A", "--data-dir", str(tmp_path),
                       "--metrics-listen", address])
    assert exited.value.code == 2
    assert f"--metrics-listen: {words}" in capsys.readouterr().err


def test_metrics_listen_is_off_by_default_and_read_from_the_config_file(tmp_path: Path) -> None:
    assert "metrics_address" not in load_settings(
        ["--cluster-id", "A", "--data-dir", str(tmp_path)]
    )
    config = tmp_path / "linkd.toml"
    config.write_text('cluster_id = "A"\nmetrics_listen = "[::1]:9100"\n')
    settings = load_settings(["--config", str(config), "--data-dir", str(tmp_path)])
    assert settings["metrics_address"] == ("::1", 9100)


def documented_families() -> set[tuple[str, str]]:
    """(name, type) of every row of docs/metrics.md's tables of families."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|", text, re.MULTILINE)
    return {(name, kind) for name, kind in rows}


def test_docs_list_exactly_the_exposed_families(daemon_factory: Any) -> None:
    address = f"127.0.0.1:{free_port()}"
    daemon_factory("A", extra_args=["--metrics-listen", address])
    exposed = set(re.findall(r"^# TYPE (\S+) (\S+)$", scrape_text(address), re.MULTILINE))
    documented = documented_families()
    assert exposed - documented == set(), "exposed but not in docs/metrics.md"
    assert documented - exposed == set(), "in docs/metrics.md but not exposed"


def _mm2_properties(a_kafka: str, b_kafka: str) -> str:
    return "\n".join([
        "clusters = A, B",
        f"A.bootstrap.servers = {a_kafka}",
        f"B.bootstrap.servers = {b_kafka}",
        "A->B.enabled = true",
        "topics = orders.*",
        "groups = app-.*",
        "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "refresh.topics.interval.seconds = 1",
        "refresh.groups.interval.seconds = 1",
        "emit.checkpoints.interval.seconds = 1",
        "sync.topic.acls.enabled = false",
    ]) + "\n"


def test_a_mirror_link_exposes_mirrormaker2_metrics(daemon_factory: Any) -> None:
    kafka = {alias: f"127.0.0.1:{free_port()}" for alias in ("A", "B")}
    metrics_b = f"127.0.0.1:{free_port()}"
    daemon_factory("A", extra_args=["--kafka-listen", kafka["A"]])
    b = daemon_factory("B", extra_args=["--kafka-listen", kafka["B"],
                                        "--metrics-listen", metrics_b])
    a_admin = KafkaAdmin({"bootstrap.servers": kafka["A"]})
    a_admin.create_topics([NewTopic("orders", num_partitions=1)])["orders"].result(WAIT_S)
    producer = KafkaProducer({"bootstrap.servers": kafka["A"], "linger.ms": 5})
    for i in range(40):
        producer.produce("orders", value=f"v{i}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0
    consumer = KafkaConsumer({"bootstrap.servers": kafka["A"], "group.id": "app-1",
                              "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", 0, 30)], asynchronous=False)
    consumer.close()

    AdminClient({"bootstrap.servers": b.bootstrap}).create_mirror_link(
        "mm2", _mm2_properties(kafka["A"], kafka["B"]), alias="B"
    )
    source = {"mirror_link": "mm2", "target": "B", "topic": "A.orders", "partition": "0"}
    checkpoint = {"mirror_link": "mm2", "source": "A", "target": "B", "group": "app-1",
                  "topic": "A.orders", "partition": "0"}
    prefix = "kafka_connect_mirror_"

    def mirrored() -> Samples | None:
        samples = scrape(metrics_b)
        count = value(samples, prefix + "source_connector_record_count", **source)
        latency = value(samples, prefix + "checkpoint_connector_checkpoint_latency_ms_max",
                        **checkpoint)
        return samples if count == 40 and latency is not None else None

    samples = poll("the MM2 metrics of 40 records and a checkpoint", mirrored)
    for name in ("replication_latency_ms", "replication_latency_ms_max", "record_age_ms",
                 "record_age_ms_avg", "byte_rate", "record_rate"):
        got = value(samples, prefix + "source_connector_" + name, **source)
        assert got is not None and got >= 0, name
    assert value(samples, prefix + "source_connector_byte_count", **source) == sum(
        len(f"v{i}") for i in range(40)
    )
    assert (value(samples, prefix + "checkpoint_connector_checkpoint_latency_ms",
                  **checkpoint) or -1) >= 0
    # No replication link on B: its link families have no samples.
    assert "ccr_link_state" not in samples
    # B first: its engine's clients would wait for A, gone, until the stop bound.
    b.terminate()
