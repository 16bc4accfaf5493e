"""Kafka client configurations of one cluster alias, from its `mm2.properties` settings.

Rules:
- Every client of cluster A gets `bootstrap.servers` and `security.protocol` from
  A's resolved client properties (`A.key` over top-level `key`).
- `producer.X`, `consumer.X` and `admin.X` are passed as `X` to that kind of client
  only, after the shared ones, so they win. They are handed to librdkafka as
  written, so they must be names librdkafka knows; `consumer.max.poll.records`
  is the exception: it sets the mirror's batch size (MM2's consumer setting) and
  is not passed on.
- Shared `ssl.*` and `sasl.*` keys are passed to every client of the cluster
  (`A.ssl.ca.location`, `A.sasl.username`, ... over top-level ones), as MM2
  passes a cluster's client properties. Java's `sasl.jaas.config`, which
  librdkafka does not know, becomes `sasl.username` / `sasl.password` (its
  `username="..."` and `password="..."` options) unless those are set.
- The engine's own settings (acks, idempotence, isolation level, transactional
  id, offset handling) are applied last: they are what the engine's guarantees
  rest on. Its tuning defaults come first, so users can change them: linger.ms=5,
  and max.in.flight.requests.per.connection=2 for producers (librdkafka's
  idempotent producer at its default of 5 spends a broker thread's CPU waiting
  for a free slot; at 2 it costs what a plain producer does, with the same
  throughput on these brokers; Connect's own producers run at 1), and
  fetch.queue.backoff.ms=10 for consumers: when the prefetched records pass
  librdkafka's queue thresholds (64 MiB by default, about 65,000 records of
  1 KB) a partition's next fetch waits that long, 1 s by default, even once the
  engine has emptied the queue; a copy behind its source then stops for up to
  a second with nothing to do. Every client defaults to reconnect.backoff.ms=10:
  librdkafka drops its bootstrap connection after the first metadata and holds
  the next connection back for half that backoff (50 ms at its default of
  100), which every client the engine makes at start-up waited for.
- `logger` (a daemon hosting the link gives one): every client's librdkafka
  messages go to it (confluent-kafka's `logger` option) instead of stderr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from linkd.core.mirror.config import ClusterConfig

__all__ = ["MAX_POLL_RECORDS_DEFAULT", "ClientConfigs"]

MAX_POLL_RECORDS_DEFAULT = 500  # Kafka's consumer default for max.poll.records
MAX_POLL_RECORDS_LIMIT = 100_000
# Tuning defaults of every client (users' settings win).
CLIENT_DEFAULTS: dict[str, Any] = {"reconnect.backoff.ms": 10}
# Tuning defaults of every producer (users' producer.* settings win).
PRODUCER_DEFAULTS: dict[str, Any] = {
    **CLIENT_DEFAULTS, "linger.ms": 5, "max.in.flight.requests.per.connection": 2
}
# Tuning defaults of every consumer (users' consumer.* settings win).
CONSUMER_DEFAULTS: dict[str, Any] = {**CLIENT_DEFAULTS, "fetch.queue.backoff.ms": 10}
_SHARED_PREFIXES = ("ssl.", "sasl.")
_KINDS = ("producer.", "consumer.", "admin.")


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _without_jaas(conf: dict[str, str], alias: str) -> dict[str, str]:
    """`sasl.jaas.config` (Java clients) as librdkafka's sasl.username/sasl.password."""
    jaas = conf.pop("sasl.jaas.config", None)
    if jaas is None:
        return conf
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(jaas)}
    if "username" not in options or "password" not in options:
        raise ValueError(f'{alias}.sasl.jaas.config: needs username="..." and password="..."')
    conf.setdefault("sasl.username", options["username"])
    conf.setdefault("sasl.password", options["password"])
    return conf


class ClientConfigs:
    def __init__(self, cluster: ClusterConfig, *, logger: Any = None) -> None:
        self.alias = cluster.alias
        self.logger = logger
        props = dict(cluster.client_properties)
        base: dict[str, str] = {"bootstrap.servers": ",".join(cluster.bootstrap_servers)}
        if cluster.security_protocol and cluster.security_protocol.upper() != "PLAINTEXT":
            base["security.protocol"] = cluster.security_protocol
        for key in sorted(props):
            if key.startswith(_SHARED_PREFIXES):
                base[key] = props[key]
        self._base = _without_jaas(base, self.alias)
        self._per_kind: dict[str, dict[str, str]] = {k: {} for k in _KINDS}
        for key in sorted(props):
            for kind in _KINDS:
                if key.startswith(kind):
                    self._per_kind[kind][key[len(kind) :]] = props[key]
        consumer = self._per_kind["consumer."]
        raw = consumer.pop("max.poll.records", str(MAX_POLL_RECORDS_DEFAULT))
        try:
            batch = int(raw)
        except ValueError as exc:
            raise ValueError(
                f"{self.alias}.consumer.max.poll.records: not a number: {raw}"
            ) from exc
        if not 1 <= batch <= MAX_POLL_RECORDS_LIMIT:
            raise ValueError(
                f"{self.alias}.consumer.max.poll.records must be in 1..{MAX_POLL_RECORDS_LIMIT}"
            )
        self.max_poll_records = batch

    @property
    def bootstrap(self) -> str:
        return self._base["bootstrap.servers"]

    def _merge(
        self, kind: str, own: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        conf: dict[str, Any] = dict(defaults or {})
        conf.update(self._base)
        conf.update(self._per_kind[kind])
        conf.update(own)
        if self.logger is not None:
            conf["logger"] = self.logger
        return conf

    def admin(self) -> dict[str, Any]:
        return self._merge("admin.", {}, CLIENT_DEFAULTS)

    def producer(self, transactional_id: str | None = None) -> dict[str, Any]:
        own: dict[str, Any] = {"acks": "all", "enable.idempotence": True}
        if transactional_id is not None:
            own["transactional.id"] = transactional_id
        return self._merge("producer.", own, PRODUCER_DEFAULTS)

    def consumer(self, group_id: str, *, read_committed: bool = False) -> dict[str, Any]:
        own: dict[str, Any] = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
        return self._merge("consumer.", own, CONSUMER_DEFAULTS)
