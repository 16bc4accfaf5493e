"""What a Kafka request handler receives besides its request body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from linkd.core.errors import ClusterError
from linkd.kafka.errors import kafka_code, kafka_message
from linkd.kafka.fetch_sessions import FetchSessionCache
from linkd.node import ClusterNode

# "Not requested" in Kafka's authorized-operations fields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@dataclass(frozen=True, slots=True)
class Broker:
    """The one broker a linkd cluster presents to Kafka clients."""

    node_id: int
    host: str
    port: int
    # The broker configs this cluster runs with, by Kafka's names (name, value,
    # Kafka ConfigType): what DescribeConfigs answers for the broker, read-only.
    configs: tuple[tuple[str, str, int], ...] = ()

    def as_metadata(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "broker_id": self.node_id,
            "host": self.host,
            "port": self.port,
            "rack": None,
        }


# The principal of a connection that has not authenticated (Kafka's name).
ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Context:
    node: ClusterNode
    broker: Broker
    api_version: int
    client_id: str
    client_host: str
    # auto.create.topics.enable: a Metadata request that allows it creates an
    # unknown topic. num.partitions: the partitions of such a topic, and of a
    # CreateTopics that asks for the default (-1).
    auto_create_topics: bool = False
    num_partitions: int = 1
    # The listener's incremental fetch sessions (KIP-227).
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    # Who sent the request: "Type:name", as Kafka's KafkaPrincipal prints it
    # (User:ANONYMOUS on a PLAINTEXT listener).
    principal: str = ANONYMOUS


Handler = Callable[[Context, Any], Awaitable[dict[str, Any] | None]]


def error_fields(
    exc: ClusterError | None, *, coordinator: bool = False, by_id: bool = False
) -> dict[str, Any]:
    """`error_code` and `error_message` of a result (no error: 0 and None)."""
    if exc is None:
        return {"error_code": 0, "error_message": None}
    return {
        "error_code": kafka_code(exc, coordinator=coordinator, by_id=by_id),
        "error_message": kafka_message(exc),
    }


def ok_or_error(exc: ClusterError | None, *, coordinator: bool = False) -> int:
    return 0 if exc is None else kafka_code(exc, coordinator=coordinator)


def operations_bits(operations: tuple[int, ...]) -> int:
    """Kafka's authorized-operations bit field (bit n: AclOperation n)."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits
