"""Every API of both listeners, asked on the wire by a client with no ACLs
under `--authorizer acl`: every Kafka API the listener lists in ApiVersions,
and every method of every gRPC service (read from the service descriptors,
so a method added later is called too). Each is refused with the code Kafka
answers (or, for the calls that filter, answers without what may not be
seen), and nothing changes; a call answered otherwise fails the suite."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_status import rpc_status
from kio.schema.errors import ErrorCode as K

from ccr.v1 import admin_pb2, cluster_pb2, errors_pb2, replication_pb2
from linkd.kafka.server import SUPPORTED
from tests.harness import Daemon, free_port
from tests.kafka_raw import RawClient

TOPIC = {"name": "t", "partitions": [{"partition_index": 0}]}
TXN = "tx"
T, G, C, X = (K.topic_authorization_failed, K.group_authorization_failed,
              K.cluster_authorization_failed, K.transactional_id_authorization_failed)

# (API key, version, body (missing fields are zero), the code expected somewhere)
CASES: list[tuple[int, int, dict[str, Any], K]] = [
    (0, 11, {"acks": 1, "topic_data": [{"name": "t", "partition_data": [{"index": 0}]}]}, T),
    (0, 11, {"acks": 1, "transactional_id": TXN,
             "topic_data": [{"name": "t", "partition_data": [{"index": 0}]}]}, X),
    (1, 12, {"max_bytes": 1000, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "partition_max_bytes": 100}]}]}, T),
    (2, 10, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
     T),
    (3, 12, {"topics": [{"name": "t"}]}, T),
    (8, 9, {"group_id": "g", "topics": [TOPIC]}, G),
    (9, 9, {"groups": [{"group_id": "g", "topics": None}]}, G),
    (10, 5, {"key_type": 0, "coordinator_keys": ["g"]}, G),
    (10, 5, {"key_type": 1, "coordinator_keys": [TXN]}, X),
    (11, 9, {"group_id": "g", "session_timeout": 10000, "protocol_type": "consumer",
             "protocols": [{"name": "range", "metadata": b""}]}, G),
    (12, 4, {"group_id": "g", "member_id": "m"}, G),
    (13, 5, {"group_id": "g", "members": [{"member_id": "m"}]}, G),
    (14, 5, {"group_id": "g", "member_id": "m"}, G),
    (15, 5, {"groups": ["g"]}, G),
    (19, 7, {"topics": [{"name": "t2", "num_partitions": 1, "replication_factor": 1}]}, T),
    (20, 6, {"topics": [{"name": "t"}]}, T),
    (21, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 0}]}]},
     T),
    (22, 5, {"transactional_id": TXN, "transaction_timeout": 60000}, X),
    (22, 5, {"transactional_id": None, "transaction_timeout": -1}, C),
    (23, 4, {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]}, T),
    (24, 3, {"v3_and_below_transactional_id": TXN,
             "v3_and_below_topics": [{"name": "t", "partitions": [0]}]}, X),
    (25, 4, {"transactional_id": TXN, "group_id": "g"}, X),
    (26, 4, {"transactional_id": TXN}, X),
    (28, 4, {"transactional_id": TXN, "group_id": "g", "topics": [TOPIC]}, X),
    (29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
             "permission_type": 1}, C),
    (30, 3, {"creations": [{"resource_type": 2, "resource_name": "t",
                            "resource_pattern_type": 3, "principal": "User:a", "host": "*",
                            "operation": 3, "permission_type": 3}]}, C),
    (31, 3, {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1,
                          "operation": 1, "permission_type": 1}]}, C),
    (32, 4, {"resources": [{"resource_type": 2, "resource_name": "t"}]}, T),
    (32, 4, {"resources": [{"resource_type": 4, "resource_name": "0"}]}, C),
    (32, 4, {"resources": [{"resource_type": 32, "resource_name": "g"}]}, G),
    (33, 2, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}]}, T),
    (34, 2, {"dirs": [{"path": "/x", "topics": [{"name": "t", "partitions": [0]}]}]}, C),
    (35, 4, {"topics": None}, C),
    (37, 3, {"topics": [{"name": "t", "count": 2}]}, T),
    (42, 2, {"groups_names": ["g"]}, G),
    (43, 2, {"topic_partitions": [{"topic": "t", "partitions": [0]}]}, C),
    (44, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}]}, T),
    (45, 0, {"topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}, C),
    (46, 0, {"topics": None}, C),
    (47, 0, {"group_id": "g", "topics": [TOPIC]}, G),
    (55, 2, {"topics": [{"topic_name": "__cluster_metadata",
                         "partitions": [{"partition_index": 0}]}]}, C),
    (75, 0, {"topics": [{"name": "t"}], "response_partition_limit": 10}, T),
    # SCRAM credentials: the rule is in place before the APIs are served.
    (50, 0, {"users": None}, C),
    (51, 0, {"deletions": [{"name": "alice", "mechanism": 1}], "upsertions": []}, C),
]
NAMES = {key: api.name for key, api in SUPPORTED.items()} | {
    50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials"}
# Answered without a refusal: ApiVersions; ListGroups and DescribeCluster
# (checked below: they filter or report).
UNREFUSED = {18, 16, 60, 17, 36}  # (17, 36: authentication itself)


def _codes(value: Any) -> set[int]:
    """Every *error_code field anywhere in a response."""
    found: set[int] = set()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name.endswith("error_code") and item is not None:
                found.add(int(item))
            else:
                found |= _codes(item)
    elif isinstance(value, tuple):
        for item in value:
            found |= _codes(item)
    return found


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("authz-wire")) / "data"
    seed = ["--kafka-listen", f"127.0.0.1:{port}", "--authorizer", "acl"]
    with Daemon("AW", data, extra_args=[*seed, "--super-users", "User:ANONYMOUS"]) as daemon:
        raw = RawClient(port)
        created = raw.call(19, 7, {"topics": [{"name": "t", "num_partitions": 1,
                                               "replication_factor": 1}]})
        assert created.topics[0].error_code == 0
        raw.close()
        daemon.terminate()
        daemon.extra_args = seed
        daemon.start()
        daemon.wait_ready()
        daemon.kafka_port = port  # type: ignore[attr-defined]
        yield daemon


@pytest.fixture(scope="module")
def port(daemon: Daemon) -> int:
    return int(daemon.kafka_port)  # type: ignore[attr-defined]


def test_every_listed_api_is_covered(port: int) -> None:
    """What the listener says it serves (ApiVersions), not what the code
    table says: an API answered without a case here fails."""
    raw = RawClient(port)
    try:
        listed = raw.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    finally:
        raw.close()
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in listed.api_keys}
    assert set(served) == set(SUPPORTED)
    assert set(served) <= {key for key, *_ in CASES} | UNREFUSED, \
        sorted(set(served) - {key for key, *_ in CASES} - UNREFUSED)
    for key, version, _, _ in CASES:
        if key in served:
            assert served[key][0] <= version <= served[key][1]


@pytest.mark.parametrize(("key", "version", "body", "expected"), CASES,
                         ids=[f"{NAMES[c[0]]}-{c[3].name}" for c in CASES])
def test_refused_without_acls(port: int, key: int, version: int, body: dict[str, Any],
                              expected: K) -> None:
    if key not in SUPPORTED:
        pytest.skip(f"{NAMES[key]} is not served yet")
    raw = RawClient(port)
    try:
        codes = _codes(raw.call(key, version, body))
    finally:
        raw.close()
    assert int(expected) in codes, codes
    assert int(K.unknown_server_error) not in codes


def test_filtering_apis_answer_without_what_may_not_be_seen(port: int) -> None:
    raw = RawClient(port)
    try:
        listed = raw.call(16, 5, {})
        everything = raw.call(3, 10, {"topics": None,
                                      "include_cluster_authorized_operations": True})
        cluster = raw.call(60, 1, {"include_cluster_authorized_operations": True,
                                   "endpoint_type": 1})
        partitions = raw.call(75, 0, {"topics": [], "response_partition_limit": 10})
    finally:
        raw.close()
    assert listed.error_code == 0 and listed.groups == ()
    assert everything.topics == () and everything.cluster_authorized_operations == 0
    assert cluster.error_code == 0 and cluster.cluster_authorized_operations == 0
    assert partitions.topics == ()


# -- gRPC: every method of every service ---------------------------------------------------

SERVICES = [
    cluster_pb2.DESCRIPTOR.services_by_name["Cluster"],
    admin_pb2.DESCRIPTOR.services_by_name["Admin"],
    replication_pb2.DESCRIPTOR.services_by_name["Replication"],
]
E = errors_pb2
# The methods answered without an ACL refusal, and what their answer to a
# principal with no ACLs must show instead (anything else fails).
UNGATED: dict[str, Any] = {
    "Cluster/Health": lambda r: r.status == "SERVING",  # a probe: nothing to guard
    "Cluster/ListTopics": lambda r: not r.topics,  # only what DESCRIBE allows
    "Cluster/ListGroups": lambda r: not r.groups,
    "Cluster/Fetch": lambda r: [p.error.code for p in r.partitions]
    == [E.ERROR_CODE_TOPIC_AUTHORIZATION_FAILED],  # refused per partition
    "Admin/DescribeCluster": lambda r: bool(r.cluster_id),  # who it is, as Kafka's
    "Admin/ListNamespaces": lambda r: not r.namespaces,
    "Admin/ListLinks": lambda r: not r.links,
    "Admin/ListMirrorLinks": lambda r: not r.links,
    # A link session starts with it: a nonce, nothing stored.
    "Replication/Challenge": lambda r: len(r.nonce) > 0,
}
# ACL refusals (Cluster, Admin); a link call without a session (Replication).
REFUSED = {
    "Cluster": {E.ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, E.ERROR_CODE_GROUP_AUTHORIZATION_FAILED,
                E.ERROR_CODE_CLUSTER_AUTHORIZATION_FAILED,
                E.ERROR_CODE_TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
    "Admin": {E.ERROR_CODE_CLUSTER_AUTHORIZATION_FAILED, E.ERROR_CODE_TOPIC_AUTHORIZATION_FAILED},
    "Replication": {E.ERROR_CODE_LINK_AUTHENTICATION_FAILED},
}
METHODS = [(service, method) for service in SERVICES for method in service.methods]


def _filled(descriptor: Descriptor, depth: int = 0) -> Message:
    """A request with every string field "x" and one element in each repeated
    message (so a per-item check has an item to refuse)."""
    message = message_factory.GetMessageClass(descriptor)()
    for f in descriptor.fields:
        repeated = f.is_repeated
        if f.type == FieldDescriptor.TYPE_STRING:
            if repeated:
                getattr(message, f.name).append("x")
            elif f.containing_oneof is None:
                setattr(message, f.name, "x")
        elif f.type == FieldDescriptor.TYPE_MESSAGE and depth < 2 and repeated:
            if f.message_type.GetOptions().map_entry:
                continue
            getattr(message, f.name).add().CopyFrom(_filled(f.message_type, depth + 1))
    return message


def _call(daemon: Daemon, service: Any, method: MethodDescriptor) -> Any:
    response_cls = message_factory.GetMessageClass(method.output_type)
    with grpc.insecure_channel(daemon.bootstrap) as channel:
        stub = channel.unary_unary(
            f"/{service.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_cls.FromString,
        )
        return stub(_filled(method.input_type), timeout=30)


def test_the_tables_name_only_methods_that_exist() -> None:
    names = {f"{s.name}/{m.name}" for s, m in METHODS}
    assert set(UNGATED) <= names


@pytest.mark.parametrize(("service", "method"), METHODS,
                         ids=[f"{s.name}/{m.name}" for s, m in METHODS])
def test_every_grpc_method_is_refused_without_acls(
    daemon: Daemon, service: Any, method: MethodDescriptor
) -> None:
    name = f"{service.name}/{method.name}"
    if name in UNGATED:
        assert UNGATED[name](_call(daemon, service, method)), name
        return
    with pytest.raises(grpc.RpcError) as info:
        answered = _call(daemon, service, method)
        raise AssertionError(f"{name} answered a principal with no ACLs: {answered}")
    status = rpc_status.from_call(info.value)  # type: ignore[arg-type]
    assert status is not None, f"{name}: {info.value.code()} {info.value.details()}"
    detail = E.ErrorDetail()
    assert status.details and status.details[0].Unpack(detail), name
    assert detail.code in REFUSED[service.name], (name, E.ErrorCode.Name(detail.code),
                                                  detail.message)
