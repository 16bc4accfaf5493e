"""The daemon's Prometheus metrics (`linkd --metrics-listen`, docs/metrics.md).

Two kinds, kept apart:
- Events (requests, their records, bytes and latency; a link's fetch rounds
  and SYNC acknowledgements) are counters and histograms of the
  `prometheus_client` library, updated where they happen (`DaemonMetrics`).
- What is true now (a link's state, its lags, what its follower replicated,
  the MirrorMaker 2 engines' own metrics) is read at scrape time by
  `StateCollector`, from the same state describe-link and
  describe-mirror-link read (`linkd.core.link_metrics`), so it cannot drift
  from them. The scrape runs in the HTTP server's thread; the state belongs
  to the event loop, so the collector asks the loop for one snapshot
  (`on_loop`) and builds the families from it.

Every family is exposed from the start, with no samples until there is
something to say (a lag not known now has no sample).
"""

from __future__ import annotations

import asyncio
import enum
import math
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from linkd.core import records as rb
from linkd.core.link_metrics import STATES, LinkSample

__all__ = [
    "MIRROR_CHECKPOINT_METRICS",
    "MIRROR_SOURCE_METRICS",
    "DaemonMetrics",
    "Listener",
    "MirrorRow",
    "Snapshot",
    "StateCollector",
    "on_loop",
    "parse_address",
    "serve_metrics",
]

# Seconds: from a millisecond to the longest a long poll or a SYNC wait lasts.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
# How long a scrape waits for the event loop's snapshot.
SNAPSHOT_TIMEOUT_S = 5.0

# The `_created` series of counters and histograms carry no information an
# operator reads here; Prometheus' own exposition omits them too.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Listener(enum.StrEnum):
    """Which listener served a produce or fetch request."""

    KAFKA = "kafka"
    GRPC = "grpc"


def batch_counts(data: bytes | memoryview) -> tuple[int, int]:
    """(records, bytes) of the whole record batches in `data`; a torn tail
    (never returned by this daemon) counts as bytes only."""
    records = 0
    position = 0
    size = len(data)
    while position + rb.HEADER_SIZE <= size:
        try:
            header = rb.parse_header(data, position)
        except rb.CorruptBatchError:
            break
        if position + header.size_bytes > size:
            break
        records += header.record_count
        position += header.size_bytes
    return records, size


class DaemonMetrics:
    """The event metrics, in a registry of the daemon's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.produce_requests = Counter(
            "ccr_produce_requests", "Produce requests served, by listener",
            ["listener"], registry=r,
        )
        self.produce_records = Counter(
            "ccr_produce_records", "Records appended by produce requests, by listener",
            ["listener"], registry=r,
        )
        self.produce_bytes = Counter(
            "ccr_produce_bytes", "Bytes of record batches appended by produce requests",
            ["listener"], registry=r,
        )
        self.produce_seconds = Histogram(
            "ccr_produce_request_seconds",
            "Produce request latency (acks=all: until the record is acknowledged)",
            ["listener"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.fetch_requests = Counter(
            "ccr_fetch_requests", "Fetch requests served, by listener", ["listener"], registry=r
        )
        self.fetch_records = Counter(
            "ccr_fetch_records", "Records returned by fetch requests, by listener",
            ["listener"], registry=r,
        )
        self.fetch_bytes = Counter(
            "ccr_fetch_bytes", "Bytes of record batches returned by fetch requests",
            ["listener"], registry=r,
        )
        self.fetch_seconds = Histogram(
            "ccr_fetch_request_seconds",
            "Fetch request latency, long-poll wait included",
            ["listener"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.link_fetch_rounds = Counter(
            "ccr_link_fetch_rounds",
            "Fetch rounds the follower side of a link finished (answer applied and durable)",
            ["link"], registry=r,
        )
        self.link_fetch_round_seconds = Histogram(
            "ccr_link_fetch_round_seconds",
            "From a follower's fetch request leaving to the answer's records being durable "
            "here (a caught-up follower's long poll included)",
            ["link"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.link_sync_ack_seconds = Histogram(
            "ccr_link_sync_ack_seconds",
            "acks=all produces into a partition an IN_SYNC link leads: from the records "
            "being durable here to the follower's acknowledgement",
            ["link"], buckets=LATENCY_BUCKETS, registry=r,
        )

    @contextmanager
    def produce_request(self, listener: Listener) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.produce_requests.labels(listener.value).inc()
            self.produce_seconds.labels(listener.value).observe(time.perf_counter() - start)

    @contextmanager
    def fetch_request(self, listener: Listener) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.fetch_requests.labels(listener.value).inc()
            self.fetch_seconds.labels(listener.value).observe(time.perf_counter() - start)

    def produced(self, listener: Listener, batch: bytes) -> None:
        """A batch the node appended (not a refused one, nor a repeat)."""
        records, size = batch_counts(batch)
        self.produce_records.labels(listener.value).inc(records)
        self.produce_bytes.labels(listener.value).inc(size)

    def fetched(self, listener: Listener, data: Iterable[bytes]) -> None:
        records = size = 0
        for chunk in data:
            n, b = batch_counts(chunk)
            records += n
            size += b
        self.fetch_records.labels(listener.value).inc(records)
        self.fetch_bytes.labels(listener.value).inc(size)

    def fetch_round(self, link: str, seconds: float | None) -> None:
        """A round finished; `seconds` since the follower's request left, when
        there was one (a leader's read-ahead push answers no request of the
        follower's: it counts as a round, with no latency)."""
        self.link_fetch_rounds.labels(link).inc()
        if seconds is not None:
            self.link_fetch_round_seconds.labels(link).observe(max(0.0, seconds))

    def sync_acked(self, links: Iterable[str], seconds: float) -> None:
        for link in links:
            self.link_sync_ack_seconds.labels(link).observe(max(0.0, seconds))

    def forget_link(self, link: str) -> None:
        """A deleted link's event series go with it."""
        for metric in (
            self.link_fetch_rounds,
            self.link_fetch_round_seconds,
            self.link_sync_ack_seconds,
        ):
            try:
                metric.remove(link)
            except KeyError:
                pass


# -- state read at scrape time ---------------------------------------------------------------

# MirrorMaker 2's metric names (MirrorSourceMetrics, MirrorCheckpointMetrics),
# as `linkd.core.mirror.metrics` reports them.
MIRROR_SOURCE_METRICS: tuple[str, ...] = (
    "record-count",
    "record-rate",
    "byte-count",
    "byte-rate",
    *(f"{base}{suffix}" for base in ("record-age-ms", "replication-latency-ms")
      for suffix in ("", "-min", "-max", "-avg")),
)
MIRROR_CHECKPOINT_METRICS: tuple[str, ...] = tuple(
    f"checkpoint-latency-ms{suffix}" for suffix in ("", "-min", "-max", "-avg")
)
MIRROR_SOURCE_PREFIX = "kafka_connect_mirror_source_connector_"
MIRROR_CHECKPOINT_PREFIX = "kafka_connect_mirror_checkpoint_connector_"
MIRROR_SOURCE_LABELS = ("mirror_link", "target", "topic", "partition")
MIRROR_CHECKPOINT_LABELS = ("mirror_link", "source", "target", "group", "topic", "partition")


def jmx_name(prefix: str, metric: str) -> str:
    """A MirrorMaker 2 attribute as Prometheus' JMX exporter names it."""
    return prefix + metric.replace("-", "_")


@dataclass(frozen=True, slots=True)
class MirrorRow:
    """One (connector, key) row of a mirror link's MM2 metrics."""

    mirror_link: str
    group: str  # "MirrorSourceConnector" | "MirrorCheckpointConnector"
    labels: tuple[tuple[str, str], ...]  # MM2's tags, in order
    values: tuple[tuple[str, float], ...]  # MM2's metric name -> value (NaN: none yet)


@dataclass(frozen=True, slots=True)
class Snapshot:
    links: tuple[LinkSample, ...]
    mirrors: tuple[MirrorRow, ...]
    # Link calls this daemon refused, by reason (`link_auth.Refusal`), sorted.
    refused_sessions: tuple[tuple[str, int], ...] = ()


def mirror_rows(mirror_link: str, rows: Iterable[dict[str, Any]]) -> list[MirrorRow]:
    """`mirror.runner.MirrorRunner.metrics` rows as MirrorRows."""
    out = []
    for row in rows:
        group = str(row["group"])
        if group == "MirrorSourceConnector":
            labels = [("target", row["target"]), ("topic", row["topic"]),
                      ("partition", row["partition"])]
        else:
            labels = [("source", row["source"]), ("target", row["target"]),
                      ("group", row["consumer_group"]), ("topic", row["topic"]),
                      ("partition", row["partition"])]
        values = tuple(
            (name, math.nan if value is None else float(value))
            for name, value in sorted(row["metrics"].items())
        )
        out.append(
            MirrorRow(mirror_link, group, tuple((k, str(v)) for k, v in labels), values)
        )
    return out


class StateCollector(Collector):
    """Link and mirror-link families, read from one snapshot per scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot], version: str = "") -> None:
        self._snapshot = snapshot
        self._version = version

    def describe(self) -> Iterable[Metric]:
        # Registration must not take a snapshot (the loop may not run yet).
        return list(self._families(Snapshot((), ())))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._snapshot()))

    def _families(self, snap: Snapshot) -> Iterator[Metric]:
        build = GaugeMetricFamily(
            "ccr_build_info",
            "1, labelled with the daemon's version and the Python it runs on",
            labels=["version", "python"],
        )
        build.add_metric([self._version, platform.python_version()], 1.0)
        yield build
        yield from _link_families(snap.links)
        refused = CounterMetricFamily(
            "ccr_link_sessions_refused",
            "Link calls this daemon refused for their session (no session, bad proof, "
            "expired session, bad MAC, ...), by reason",
            labels=["reason"],
        )
        for reason, count in snap.refused_sessions:
            refused.add_metric([reason], float(count))
        yield refused
        yield from _mirror_families(snap.mirrors)


def _link_families(links: Iterable[LinkSample]) -> Iterator[Metric]:
    state = GaugeMetricFamily(
        "ccr_link_state",
        "1 for the link's current state, 0 for every other (as describe-link shows it)",
        labels=["link", "state"],
    )
    lag_records = GaugeMetricFamily(
        "ccr_link_partition_lag_records",
        "Records a follower partition lacks of its source's high watermark (known lags only)",
        labels=["link", "topic", "partition"],
    )
    lag_ms = GaugeMetricFamily(
        "ccr_link_partition_lag_ms",
        "Milliseconds since a lagging follower partition last held its source's high "
        "watermark; 0 when caught up (known lags only)",
        labels=["link", "topic", "partition"],
    )
    max_records = GaugeMetricFamily(
        "ccr_link_max_lag_records",
        "The link's largest follower partition lag in records (MaxLag); absent when a lag "
        "is not known",
        labels=["link"],
    )
    max_ms = GaugeMetricFamily(
        "ccr_link_max_lag_ms",
        "The link's largest follower partition lag in ms; absent when a lag is not known",
        labels=["link"],
    )
    replicated_records = CounterMetricFamily(
        "ccr_link_replicated_records",
        "Records the follower side appended from the link's source (durable)",
        labels=["link"],
    )
    replicated_bytes = CounterMetricFamily(
        "ccr_link_replicated_bytes",
        "Bytes of record batches the follower side appended from the link's source",
        labels=["link"],
    )
    truncations = CounterMetricFamily(
        "ccr_link_truncations",
        "Follower partitions cut where their log parted from the source's (divergence)",
        labels=["link"],
    )
    cuts = CounterMetricFamily(
        "ccr_link_cuts",
        "Follower partitions whose unacknowledged tail was cut because their source "
        "partition is gone",
        labels=["link"],
    )
    gaps = CounterMetricFamily(
        "ccr_link_gaps",
        "Gaps a follower partition recorded: records its source no longer held when the "
        "link reached them (retention, deleted records)",
        labels=["link", "topic", "partition"],
    )
    gap_records = CounterMetricFamily(
        "ccr_link_gap_records",
        "Offsets those gaps span: records the follower partition never copied",
        labels=["link", "topic", "partition"],
    )
    partition_states = GaugeMetricFamily(
        "ccr_link_mirror_partitions",
        "Follower partitions of the link by state: copying, lag_unknown, refused, diverged, "
        "stopped (at a gap)",
        labels=["link", "state"],
    )
    leader_lag_records = GaugeMetricFamily(
        "ccr_link_leader_partition_lag_records",
        "On the side that leads: records below a led partition's high watermark its "
        "follower has not fetched past (the lag as the source sees it)",
        labels=["link", "topic", "partition"],
    )
    leader_lag_ms = GaugeMetricFamily(
        "ccr_link_leader_partition_lag_ms",
        "On the side that leads: milliseconds since the follower last held the partition's "
        "high watermark; 0 when it does",
        labels=["link", "topic", "partition"],
    )
    errors = CounterMetricFamily(
        "ccr_link_errors",
        "Calls of the link that failed on the side that dials it, by error code",
        labels=["link", "code"],
    )
    for link in links:
        for state_name, count in link.partition_states:
            partition_states.add_metric([link.name, state_name], float(count))
        for p in link.leader_partitions:
            labels = [link.name, p.topic, str(p.partition)]
            leader_lag_records.add_metric(labels, float(p.lag_records))
            leader_lag_ms.add_metric(labels, float(p.lag_ms))
        for code, count in link.errors:
            errors.add_metric([link.name, code], float(count))
    storage_refused = GaugeMetricFamily(
        "ccr_link_storage_refused_partitions",
        "Follower partitions whose fetched records this cluster's storage refused (full "
        "disk, file-size limit, read-only data directory), until a round stores them",
        labels=["link"],
    )
    for link in links:
        storage_refused.add_metric([link.name], float(link.storage_refused))
        for g in link.gaps:
            labels = [link.name, g.topic, str(g.partition)]
            gaps.add_metric(labels, float(g.gaps))
            gap_records.add_metric(labels, float(g.records))
        for name in STATES:
            state.add_metric([link.name, name], 1.0 if link.state == name else 0.0)
        for p in link.partitions:
            labels = [link.name, p.topic, str(p.partition)]
            lag_records.add_metric(labels, float(p.lag_records))
            lag_ms.add_metric(labels, float(p.lag_ms))
        if link.max_lag is not None:
            max_records.add_metric([link.name], float(link.max_lag[0]))
            max_ms.add_metric([link.name], float(link.max_lag[1]))
        replicated_records.add_metric([link.name], float(link.counters.records))
        replicated_bytes.add_metric([link.name], float(link.counters.bytes))
        truncations.add_metric([link.name], float(link.counters.truncations))
        cuts.add_metric([link.name], float(link.counters.cuts))
    yield from (state, lag_records, lag_ms, max_records, max_ms, replicated_records,
                replicated_bytes, truncations, cuts, gaps, gap_records, partition_states,
                leader_lag_records, leader_lag_ms, errors, storage_refused)


def _mirror_families(rows: Iterable[MirrorRow]) -> Iterator[Metric]:
    """MM2's metrics as the JMX exporter shows them: gauges, one family per
    attribute, MM2's tags as labels (and the mirror link hosting the flow)."""
    families: dict[tuple[str, str], GaugeMetricFamily] = {}
    for group, prefix, names, labels in (
        ("MirrorSourceConnector", MIRROR_SOURCE_PREFIX, MIRROR_SOURCE_METRICS,
         MIRROR_SOURCE_LABELS),
        ("MirrorCheckpointConnector", MIRROR_CHECKPOINT_PREFIX, MIRROR_CHECKPOINT_METRICS,
         MIRROR_CHECKPOINT_LABELS),
    ):
        for metric in names:
            families[(group, metric)] = GaugeMetricFamily(
                jmx_name(prefix, metric),
                f"MirrorMaker 2 {group} metric {metric}",
                labels=list(labels),
            )
    for row in rows:
        values = [row.mirror_link, *(value for _k, value in row.labels)]
        for metric, value in row.values:
            family = families.get((row.group, metric))
            if family is not None:
                family.add_metric(values, value)
    yield from families.values()


T = TypeVar("T")


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> T:
    """Runs `fn` on the event loop (from another thread) and returns its
    result, waiting at most SNAPSHOT_TIMEOUT_S."""

    async def run() -> T:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(SNAPSHOT_TIMEOUT_S)


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) -> (host, port); ValueError names
    what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number in 0..65535")
    return host, int(port)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """Serves the registry in Prometheus' text format over HTTP (any path;
    /metrics by convention), in a daemon thread. OSError when the address
    cannot be bound."""
    server, _thread = start_http_server(port, host, registry=registry)
    return server
