"""Every API the Kafka listener serves, asked on the wire by a client with no
ACLs under `--authorizer acl`: each is refused with the code Kafka answers
(or, for the APIs that filter, answers without what may not be seen), and
nothing changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as K

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
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
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
        yield port


def test_every_served_api_is_covered() -> None:
    assert set(SUPPORTED) <= {key for key, *_ in CASES} | UNREFUSED
    for key, version, _, _ in CASES:
        if key in SUPPORTED:
            assert SUPPORTED[key].min_version <= version <= SUPPORTED[key].max_version


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
