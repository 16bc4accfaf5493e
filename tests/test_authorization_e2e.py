"""`linkd --authorizer acl` on real daemons: confluent-kafka and the gRPC
client are refused what no ACL allows, with Kafka's codes, and granted exactly
what the ACLs allow.

Every client is User:ANONYMOUS (no authentication yet), so the ACLs are seeded
by a daemon started with `--super-users User:ANONYMOUS`, which is then
restarted without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode as K

from admin import AdminClient as CcrAdmin
from admin.errors import CcrError
from ccr.v1 import cluster_pb2, cluster_pb2_grpc, errors_pb2
from tests.harness import Daemon, free_port, run_cli
from tests.kafka_raw import RawClient

ANON = "User:ANONYMOUS"
DEADLINE_S = 30.0


class Cluster:
    def __init__(self, daemon: Daemon, port: int) -> None:
        self.daemon = daemon
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def restart(self, *args: str) -> None:
        self.daemon.terminate()
        self.daemon.extra_args = ["--kafka-listen", self.bootstrap, *args]
        self.daemon.start()
        self.daemon.wait_ready()

    def producer(self, **conf: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                         "message.timeout.ms": 20000, **conf})

    def consumer(self, group: str) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})


def _acl(rtype: Any, name: str, op: Any, *, pattern: Any = ResourcePatternType.LITERAL,
         permission: Any = AclPermissionType.ALLOW, principal: str = ANON) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


SEED_ACLS = [
    _acl(ResourceType.TOPIC, "granted", AclOperation.WRITE),
    _acl(ResourceType.TOPIC, "pre-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
    _acl(ResourceType.GROUP, "g-ok", AclOperation.READ),
    _acl(ResourceType.TOPIC, "denied", AclOperation.READ, principal="User:*"),
    _acl(ResourceType.TOPIC, "denied", AclOperation.READ, permission=AclPermissionType.DENY),
    _acl(ResourceType.TRANSACTIONAL_ID, "tx-ok", AclOperation.WRITE),
]
TOPICS = ["granted", "other", "pre-x", "denied"]


def _result(future: Future[Any]) -> Any:
    return future.result(DEADLINE_S)


def _error_of(future: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(DEADLINE_S)
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("authz")) / "data"
    args = ["--kafka-listen", f"127.0.0.1:{port}", "--authorizer", "acl"]
    with Daemon("AZ", data, extra_args=[*args, "--super-users", ANON]) as daemon:
        c = Cluster(daemon, port)
        for f in c.admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            _result(f)
        for f in c.admin.create_acls(SEED_ACLS).values():
            _result(f)
        p = c.producer()
        for t in TOPICS:
            p.produce(t, value=f"seed-{t}".encode())
        assert p.flush(DEADLINE_S) == 0
        c.restart("--authorizer", "acl")
        yield c


def _delivery_errors(p: Producer, topic: str, count: int = 1) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    for i in range(count):
        p.produce(topic, value=f"v{i}".encode(),
                  on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(DEADLINE_S) == 0
    return errors


def _poll_until(c: Consumer, want: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and want(msg):
            return msg
    raise AssertionError("nothing wanted arrived in time")


# -- produce ---------------------------------------------------------------------------------


def _refusal_code(p: Producer, topic: str) -> int | None:
    """The code a produce to `topic` was refused with: librdkafka reports it
    in the delivery report, or raises it from produce() itself once a
    metadata answer already told it the topic is not authorized (which of
    the two depends on when its metadata refresh lands)."""
    try:
        refused = _delivery_errors(p, topic)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return int(refused[0].code()) if refused[0] is not None else None


def test_produce_is_granted_only_where_write_is(cluster: Cluster) -> None:
    p = cluster.producer()
    assert _delivery_errors(p, "granted") == [None]
    assert _refusal_code(p, "other") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_idempotent_producer_with_write_on_a_topic_may_init(cluster: Cluster) -> None:
    p = cluster.producer(**{"enable.idempotence": True})
    assert _delivery_errors(p, "granted", 3) == [None, None, None]


def test_a_transactional_producer_needs_write_on_its_id(cluster: Cluster) -> None:
    p = cluster.producer(**{"transactional.id": "tx-1"})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(DEADLINE_S)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_transaction_with_its_acls_commits_records_and_offsets(cluster: Cluster) -> None:
    """WRITE on the id and the topic, READ on the group and the consumed topic:
    FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn all pass."""
    p = cluster.producer(**{"transactional.id": "tx-ok"})
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    p.produce("granted", value=b"in a transaction")
    group = cluster.consumer("g-ok")
    try:
        p.send_offsets_to_transaction([TopicPartition("pre-x", 0, 0)],
                                      group.consumer_group_metadata(), DEADLINE_S)
    finally:
        group.close()
    p.commit_transaction(DEADLINE_S)
    p.begin_transaction()
    delivered: list[KafkaError | None] = []
    p.produce("other", value=b"refused", on_delivery=lambda err, _m: delivered.append(err))
    with pytest.raises(KafkaException):
        p.commit_transaction(DEADLINE_S)
    p.poll(0)
    assert [e.code() if e else None for e in delivered] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]
    p.abort_transaction(DEADLINE_S)


# -- consume and commit ------------------------------------------------------------------------


def test_consume_and_commit_with_read_on_the_prefix_and_the_group(cluster: Cluster) -> None:
    c = cluster.consumer("g-ok")
    try:
        c.subscribe(["pre-x"])
        msg = _poll_until(c, lambda m: m.error() is None)
        assert msg.value() == b"seed-pre-x"
        committed = c.commit(message=msg, asynchronous=False)
        assert committed is not None and all(tp.error is None for tp in committed)
    finally:
        c.close()


def test_fetch_is_refused_without_read_and_deny_beats_allow(cluster: Cluster) -> None:
    for topic in ("granted", "denied"):  # WRITE only; ALLOW for User:* and DENY for us
        c = cluster.consumer("g-ok")
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            msg = _poll_until(c, lambda m: m.error() is not None)
            assert msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
        finally:
            c.close()


def test_a_group_without_read_is_refused(cluster: Cluster) -> None:
    seen: list[KafkaError] = []
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-no",
                  "auto.offset.reset": "earliest", "error_cb": seen.append})
    try:
        c.subscribe(["pre-x"])
        deadline = time.monotonic() + DEADLINE_S
        while not any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in seen):
            assert time.monotonic() < deadline, f"no GROUP_AUTHORIZATION_FAILED: {seen}"
            msg = c.poll(0.5)
            if msg is not None and msg.error() is not None:
                seen.append(msg.error())
            assert msg is None or msg.error() is not None, "a record without group READ"
    finally:
        c.close()


def test_commit_of_a_topic_without_read_is_refused_per_partition(cluster: Cluster) -> None:
    raw = RawClient(cluster.port)
    try:
        resp = raw.call(8, 8, {
            "group_id": "g-ok", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [
                {"name": "pre-x", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                  "committed_leader_epoch": -1,
                                                  "committed_metadata": ""}]},
                {"name": "granted", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                    "committed_leader_epoch": -1,
                                                    "committed_metadata": ""}]},
            ]})
    finally:
        raw.close()
    codes = {t.name: t.partitions[0].error_code for t in resp.topics}
    assert codes == {"pre-x": 0, "granted": K.topic_authorization_failed}


# -- metadata -----------------------------------------------------------------------------------


def test_metadata_lists_only_topics_the_principal_may_describe(cluster: Cluster) -> None:
    listed = set(cluster.admin.list_topics(timeout=DEADLINE_S).topics)
    # READ, WRITE imply DESCRIBE; DENY READ does not deny DESCRIBE (Kafka's rule)
    assert listed == {"granted", "pre-x", "denied"}
    named = cluster.admin.list_topics("other", timeout=DEADLINE_S).topics["other"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authorized_operations_are_the_real_ones(cluster: Cluster) -> None:
    raw = RawClient(cluster.port)
    try:
        resp = raw.call(3, 12, {"topics": [{"name": "granted", "topic_id": None}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": True})
    finally:
        raw.close()
    bits = resp.topics[0].topic_authorized_operations
    assert bits == (1 << AclOperation.WRITE.value) | (1 << AclOperation.DESCRIBE.value)
    raw = RawClient(cluster.port)
    try:
        groups = raw.call(15, 5, {"groups": ["g-ok", "g-no"],
                                  "include_authorized_operations": True})
    finally:
        raw.close()
    ok, no = groups.groups
    assert ok.error_code == 0
    assert ok.authorized_operations == (1 << AclOperation.READ.value) | (
        1 << AclOperation.DESCRIBE.value)
    assert no.error_code == K.group_authorization_failed


# -- admin -------------------------------------------------------------------------------------


def test_admin_calls_are_refused_with_kafkas_codes(cluster: Cluster) -> None:
    admin = cluster.admin
    created = admin.create_topics([NewTopic("new-topic", 1, 1)])["new-topic"]
    assert _error_of(created).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    deleted = admin.delete_topics(["granted"])["granted"]
    assert _error_of(deleted).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acl = _acl(ResourceType.TOPIC, "other", AclOperation.READ)
    assert _error_of(admin.create_acls([acl])[acl]).code() == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka drops DescribeAcls' top-level error (an empty list), so the
    # answer is read on the wire
    raw = RawClient(cluster.port)
    try:
        described = raw.call(29, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
    finally:
        raw.close()
    assert described.error_code == K.cluster_authorization_failed and not described.resources
    assert _error_of(admin.delete_acls([everything])[everything]).code() == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "granted")])
    assert _error_of(next(iter(configs.values()))).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_scram_users_are_described_only_with_cluster_describe(cluster: Cluster) -> None:
    """One refused entry per named user, as Kafka answers: an empty list
    crashed confluent-kafka 2.16.1 (SIGSEGV)."""
    described = cluster.admin.describe_user_scram_credentials(["alice", "bob"])
    assert sorted(described) == ["alice", "bob"]
    for future in described.values():
        assert _error_of(future).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Describing every user refused is Kafka's answer (the top-level error,
    # no results: tests/test_kafka_authz_rules.py), which confluent-kafka
    # 2.16.1's librdkafka cannot read: it crashes the process (SIGSEGV) on the
    # empty result list, so no confluent client asks it here.


def test_grpc_admin_verbs_need_cluster_alter(cluster: Cluster) -> None:
    with CcrAdmin(cluster.daemon.bootstrap) as admin:
        with pytest.raises(CcrError) as info:
            admin.create_namespace("topic", "orders-")
        assert info.value.code == "CLUSTER_AUTHORIZATION_FAILED"
        with pytest.raises(CcrError) as info:
            admin.create_topic("grpc-topic", partitions=1)
        assert info.value.code == "TOPIC_AUTHORIZATION_FAILED"
        assert admin.list_links() == []
        assert [t.name for t in admin.list_topics()] == ["denied", "granted", "pre-x"]
    done = run_cli("create-namespace", "--type", "topic", "--prefix", "orders-",
                   bootstrap=cluster.daemon.bootstrap)
    assert done.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    # A link's gap.policy is ALTER on the cluster too (it once had no check).
    done = run_cli("alter-link", "any-link", "--gap-policy", "stop",
                   bootstrap=cluster.daemon.bootstrap)
    assert done.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr


def test_default_mode_enforces_nothing(tmp_path: Path) -> None:
    port = free_port()
    with Daemon("NA", tmp_path / "data", extra_args=["--kafka-listen", f"127.0.0.1:{port}"]) as d:
        c = Cluster(d, port)
        _result(c.admin.create_topics([NewTopic("t", 1, 1)])["t"])
        deny = _acl(ResourceType.TOPIC, "*", AclOperation.ALL,
                    permission=AclPermissionType.DENY, principal="User:*")
        _result(c.admin.create_acls([deny])[deny])
        assert _delivery_errors(c.producer(), "t") == [None]


def test_grpc_client_calls_check_the_kafka_operations(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.daemon.bootstrap) as channel:
        stub = cluster_pb2_grpc.ClusterStub(channel)
        fetched = stub.Fetch(cluster_pb2.FetchRequest(partitions=[
            cluster_pb2.FetchPartition(topic="pre-x", partition=0, offset=0),
            cluster_pb2.FetchPartition(topic="granted", partition=0, offset=0),
        ], max_wait_ms=0), timeout=DEADLINE_S)
        by_topic = {p.topic: p for p in fetched.partitions}
        assert by_topic["pre-x"].records and not by_topic["pre-x"].HasField("error")
        assert by_topic["granted"].error.code == errors_pb2.ERROR_CODE_TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(grpc.RpcError) as info:
            stub.Produce(cluster_pb2.ProduceRequest(topic="pre-x", partition=0, batch=b"x",
                                                    acks=1), timeout=DEADLINE_S)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value.details())
        with pytest.raises(grpc.RpcError) as info:
            stub.DescribeGroup(cluster_pb2.DescribeGroupRequest(group_id="g-no"),
                               timeout=DEADLINE_S)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "GROUP_AUTHORIZATION_FAILED" in str(info.value.details())


def test_refusals_changed_nothing_and_were_logged(cluster: Cluster) -> None:
    """Last: a super user sees every topic and the seeded ACLs, as they were."""
    log = cluster.daemon.stderr_text()
    assert '"authorization refused"' in log and '"principal": "User:ANONYMOUS"' in log
    cluster.restart("--authorizer", "acl", "--super-users", ANON)
    listed = set(cluster.admin.list_topics(timeout=DEADLINE_S).topics)
    assert set(TOPICS) <= listed and "new-topic" not in listed and "grpc-topic" not in listed
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert len(_result(cluster.admin.describe_acls(everything))) == len(SEED_ACLS)
    with CcrAdmin(cluster.daemon.bootstrap) as admin:
        assert admin.list_namespaces() == []
