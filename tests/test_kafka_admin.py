"""confluent-kafka's AdminClient against linkd's Kafka listener: topics,
partitions, configs, groups, ACLs and DeleteRecords, each checked end to end
(and ACLs across a kill -9)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from ccr.v1 import cluster_pb2, cluster_pb2_grpc
from tests.harness import Daemon, free_port

FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


class Cluster:
    def __init__(self, daemon: Daemon, port: int) -> None:
        self.daemon = daemon
        self.bootstrap = f"127.0.0.1:{port}"
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def producer(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})

    def consumer(self, group: str, **conf: Any) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **conf})

    def create(self, name: str, partitions: int = 1, **configs: str) -> None:
        self.admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(20)

    def produce(self, topic: str, count: int, partition: int = 0) -> None:
        p = self.producer()
        for i in range(count):
            p.produce(topic, value=f"v{i}".encode(), partition=partition)
        assert p.flush(20) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("kafka-admin")) / "data"
    with Daemon("KA", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
        yield Cluster(daemon, port)


def error_of(future: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(20)
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def wait_until(cond: Any, timeout_s: float, consumer: Consumer | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        if consumer is not None:
            consumer.poll(0.05)
        else:
            time.sleep(0.05)


# -- topics and partitions ------------------------------------------------------------------


def test_create_describe_and_delete_topics(cluster: Cluster) -> None:
    admin = cluster.admin
    created = admin.create_topics([NewTopic("adm-a", 3, 1, config={"retention.ms": "3600000"}),
                                   NewTopic("adm-b", 1, 1)])
    for f in created.values():
        f.result(20)
    assert error_of(admin.create_topics([NewTopic("adm-a", 1, 1)])["adm-a"]).code() == \
        KafkaError.TOPIC_ALREADY_EXISTS
    bad_name = error_of(admin.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"])
    assert bad_name.code() == KafkaError.TOPIC_EXCEPTION
    assert "illegal characters" in bad_name.str()
    replicated = error_of(admin.create_topics([NewTopic("adm-rf", 1, 3)])["adm-rf"])
    assert replicated.code() == KafkaError.INVALID_REPLICATION_FACTOR
    bad_config = error_of(admin.create_topics(
        [NewTopic("adm-cfg", 1, 1, config={"no.such.key": "1"})])["adm-cfg"])
    assert bad_config.code() == KafkaError.INVALID_CONFIG
    assert "no.such.key" in bad_config.str()
    # Kafka's internal topics are not ordinary topics: refused, as Kafka does.
    internal = error_of(admin.create_topics([NewTopic("__consumer_offsets", 1, 1)])[
        "__consumer_offsets"])
    assert internal.code() == KafkaError.INVALID_REQUEST
    assert "Creation of internal topic __consumer_offsets is prohibited" in internal.str()

    # validate_only changes nothing
    admin.create_topics([NewTopic("adm-dry", 2, 1)], validate_only=True)["adm-dry"].result(20)
    listed = admin.list_topics(timeout=10).topics
    assert "adm-dry" not in listed
    assert len(listed["adm-a"].partitions) == 3
    assert listed["adm-a"].partitions[0].leader == 0
    assert listed["adm-a"].partitions[0].replicas == [0]

    described = admin.describe_topics(TopicCollection(["adm-a"]))["adm-a"].result(20)
    channel = grpc.insecure_channel(cluster.daemon.bootstrap)
    with channel:
        grpc_view = cluster_pb2_grpc.ClusterStub(channel).DescribeTopic(
            cluster_pb2.DescribeTopicRequest(name="adm-a"), timeout=10)
    assert str(described.topic_id) != ""
    assert uuid.UUID(grpc_view.topic_id).bytes == _uuid_bytes(described.topic_id)
    assert [p.id for p in described.partitions] == [0, 1, 2]

    for f in admin.delete_topics(["adm-b"]).values():
        f.result(20)
    assert "adm-b" not in admin.list_topics(timeout=10).topics
    missing = error_of(admin.delete_topics(["adm-b"])["adm-b"])
    assert missing.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _uuid_bytes(topic_id: Any) -> bytes:
    """confluent-kafka's Uuid as 16 bytes."""
    msb = topic_id.get_most_significant_bits() & (2**64 - 1)
    lsb = topic_id.get_least_significant_bits() & (2**64 - 1)
    return bytes(msb.to_bytes(8, "big") + lsb.to_bytes(8, "big"))


def test_create_partitions(cluster: Cluster) -> None:
    cluster.create("adm-grow", 2)
    cluster.admin.create_partitions([NewPartitions("adm-grow", 5)])["adm-grow"].result(20)
    assert len(cluster.admin.list_topics("adm-grow", timeout=10).topics["adm-grow"].partitions) == 5
    shrink = error_of(cluster.admin.create_partitions([NewPartitions("adm-grow", 3)])["adm-grow"])
    assert shrink.code() == KafkaError.INVALID_PARTITIONS
    assert "must be larger" in shrink.str()
    cluster.produce("adm-grow", 3, partition=4)  # the new partitions take records


def test_describe_and_alter_topic_configs(cluster: Cluster) -> None:
    cluster.create("adm-cfgs", 1, **{"retention.ms": "86400000"})
    resource = ConfigResource(ResourceType.TOPIC, "adm-cfgs")
    configs = cluster.admin.describe_configs([resource])[resource].result(20)
    assert configs["retention.ms"].value == "86400000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].is_default
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    change = ConfigResource(ResourceType.TOPIC, "adm-cfgs", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    cluster.admin.incremental_alter_configs([change])[change].result(20)
    configs = cluster.admin.describe_configs([resource])[resource].result(20)
    assert configs["max.message.bytes"].value == "2000000"
    assert configs["retention.ms"].value == "604800000"
    assert configs["retention.ms"].is_default

    bad = ConfigResource(ResourceType.TOPIC, "adm-cfgs", incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    err = error_of(cluster.admin.incremental_alter_configs([bad])[bad])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in err.str()

    broker = ConfigResource(ResourceType.BROKER, "0")
    broker_configs = cluster.admin.describe_configs([broker])[broker].result(20)
    assert broker_configs["broker.id"].value == "0" and broker_configs["broker.id"].is_read_only


def _set(resource: str, name: str, **ops: Any) -> ConfigResource:
    kind = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER,
            "group": ResourceType.GROUP}[resource]
    return ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key.replace("_", "."), value, incremental_operation=op)
        for key, (op, value) in ops.items()
    ])


def _alter(cluster: Cluster, resource: ConfigResource) -> None:
    cluster.admin.incremental_alter_configs([resource])[resource].result(20)


def _alter_error(cluster: Cluster, resource: ConfigResource) -> KafkaError:
    return error_of(cluster.admin.incremental_alter_configs([resource])[resource])


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT


def _cluster_default(cluster: Cluster, **configs: tuple[int, str | None]) -> None:
    """The cluster-wide broker default (the BROKER resource "", as Kafka's
    kafka-configs --entity-default names it), on the wire: confluent-kafka
    and kafka-python will not name an empty broker."""
    from tests.kafka_raw import RawClient

    raw = RawClient(int(cluster.bootstrap.rsplit(":", 1)[1]))
    try:
        answer = raw.call(44, 1, {"resources": [{
            "resource_type": 4, "resource_name": "",
            "configs": [{"name": key.replace("_", "."), "config_operation": op, "value": value}
                        for key, (op, value) in configs.items()]}]})
    finally:
        raw.close()
    assert [int(r.error_code) for r in answer.responses] == [0], answer


def test_broker_configs_at_both_levels_are_every_topic_s_defaults_at_once(
    cluster: Cluster,
) -> None:
    admin = cluster.admin
    broker = ConfigResource(ResourceType.BROKER, "0")
    described = admin.describe_configs([broker])[broker].result(20)
    listeners = described["advertised.listeners"]
    assert listeners.is_read_only and listeners.value == f"PLAINTEXT://{cluster.bootstrap}"
    assert not described["log.retention.ms"].is_read_only
    hours = described["log.retention.hours"]
    assert hours.value == "168" and hours.source == ConfigSource.DEFAULT_CONFIG.value
    assert len(described) > 40
    cluster.create("adm-dflt", 1, **{"segment.ms": "3600000"})
    topic = ConfigResource(ResourceType.TOPIC, "adm-dflt")
    try:
        # The cluster-wide default ("" names it), then this broker's own.
        _cluster_default(cluster, log_retention_ms=(0, "3600000"))
        retention = admin.describe_configs([topic])[topic].result(20)["retention.ms"]
        assert retention.value == "3600000"
        assert retention.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        _alter(cluster, _set("broker", "0", log_retention_ms=(SET, "1800000")))
        retention = admin.describe_configs([topic])[topic].result(20)["retention.ms"]
        assert retention.value == "1800000"
        assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        # Its synonyms: the broker configs that set it, and Kafka's default.
        assert {"log.retention.ms", "log.retention.hours"} <= set(retention.synonyms)
        own = admin.describe_configs([broker])[broker].result(20)["log.retention.ms"]
        assert own.value == "1800000" and own.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        # A topic's own setting still wins.
        _alter(cluster, _set("topic", "adm-dflt", retention_ms=(SET, "60000")))
        retention = admin.describe_configs([topic])[topic].result(20)["retention.ms"]
        assert retention.value == "60000"
        assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        # Static settings are refused by name, values checked as Kafka checks them.
        refused = _alter_error(cluster, _set("broker", "0", advertised_listeners=(SET, "x")))
        assert refused.code() == KafkaError.INVALID_CONFIG
        assert "advertised.listeners" in refused.str()
        bad = _alter_error(cluster, _set("broker", "0", log_segment_bytes=(SET, "1000")))
        assert bad.code() == KafkaError.INVALID_CONFIG and "at least 1048576" in bad.str()
    finally:
        _cluster_default(cluster, log_retention_ms=(1, None))
        _alter(cluster, _set("broker", "0", log_retention_ms=(DELETE, None)))
    back = admin.describe_configs([broker])[broker].result(20)["log.retention.ms"]
    assert back.value is None and back.source == ConfigSource.DEFAULT_CONFIG.value


def test_append_and_subtract_change_list_configs_as_kafka_does(cluster: Cluster) -> None:
    cluster.create("adm-lists", 1)
    topic = ConfigResource(ResourceType.TOPIC, "adm-lists")

    def policy() -> str:
        return str(cluster.admin.describe_configs([topic])[topic].result(20)[
            "cleanup.policy"].value)

    _alter(cluster, _set("topic", "adm-lists", cleanup_policy=(APPEND, "compact")))
    assert policy() == "delete,compact"  # the default, then what was appended
    _alter(cluster, _set("topic", "adm-lists", cleanup_policy=(SUBTRACT, "delete")))
    assert policy() == "compact"
    _alter(cluster, _set("topic", "adm-lists", cleanup_policy=(APPEND, "delete,compact")))
    assert policy() == "compact,delete"
    not_a_list = _alter_error(cluster, _set("topic", "adm-lists", retention_ms=(APPEND, "1")))
    assert not_a_list.code() == KafkaError.INVALID_REQUEST
    assert "append is not allowed for config key: retention.ms" in not_a_list.str()
    wrong = _alter_error(cluster, _set("topic", "adm-lists", cleanup_policy=(APPEND, "never")))
    assert wrong.code() == KafkaError.INVALID_CONFIG


def test_group_configs_are_checked_stored_and_described(cluster: Cluster) -> None:
    group = ConfigResource(ResourceType.GROUP, "adm-kip848")
    _alter(cluster, _set("group", "adm-kip848", consumer_session_timeout_ms=(SET, "50000")))
    described = cluster.admin.describe_configs([group])[group].result(20)
    session = described["consumer.session.timeout.ms"]
    assert session.value == "50000" and session.source == ConfigSource.GROUP_CONFIG.value
    beat = described["consumer.heartbeat.interval.ms"]
    assert beat.value == "5000" and beat.source == ConfigSource.DEFAULT_CONFIG.value
    low = _alter_error(cluster, _set("group", "adm-kip848",
                                     consumer_session_timeout_ms=(SET, "10")))
    assert low.code() == KafkaError.INVALID_CONFIG and "between 45000 and 60000" in low.str()
    unknown = _alter_error(cluster, _set("group", "adm-kip848", session_timeout_ms=(SET, "1")))
    assert unknown.code() == KafkaError.INVALID_CONFIG


# -- groups ----------------------------------------------------------------------------------


def test_list_describe_and_delete_consumer_groups_and_offsets(cluster: Cluster) -> None:
    cluster.create("adm-grp", 2)
    cluster.produce("adm-grp", 4, partition=0)
    consumer = cluster.consumer("adm-live", **FAST_GROUP, **{"client.id": "live-client"})
    consumer.subscribe(["adm-grp"])
    wait_until(lambda: len(consumer.assignment()) == 2, 30, consumer)

    listed = cluster.admin.list_consumer_groups().result(20)
    states = {g.group_id: g.state for g in listed.valid}
    assert states["adm-live"] == ConsumerGroupState.STABLE
    group = cluster.admin.describe_consumer_groups(["adm-live"])["adm-live"].result(20)
    assert group.state == ConsumerGroupState.STABLE
    assert [m.client_id for m in group.members] == ["live-client"]
    assert group.members[0].host.lstrip("/") == "127.0.0.1"
    assert sorted(tp.partition for tp in group.members[0].assignment.topic_partitions) == [0, 1]
    busy = error_of(cluster.admin.delete_consumer_groups(["adm-live"])["adm-live"])
    assert busy.code() == KafkaError.NON_EMPTY_GROUP
    consumer.close()

    # an empty group: set and list offsets, then delete the group (OffsetDelete,
    # which confluent-kafka does not expose, is tested in test_kafka_wire.py)
    offsets = ConsumerGroupTopicPartitions("adm-idle", [TopicPartition("adm-grp", 0, 3),
                                                        TopicPartition("adm-grp", 1, 0)])
    cluster.admin.alter_consumer_group_offsets([offsets])["adm-idle"].result(20)
    fetched = cluster.admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("adm-idle")])["adm-idle"].result(20)
    assert sorted((tp.partition, tp.offset) for tp in fetched.topic_partitions) == [(0, 3), (1, 0)]
    cluster.admin.delete_consumer_groups(["adm-idle"])["adm-idle"].result(20)
    assert "adm-idle" not in {g.group_id for g in cluster.admin.list_consumer_groups()
                              .result(20).valid}
    gone = error_of(cluster.admin.delete_consumer_groups(["adm-idle"])["adm-idle"])
    assert gone.code() == KafkaError.GROUP_ID_NOT_FOUND


def test_a_group_whose_static_member_closed_is_deletable_one_session_timeout_later(
    cluster: Cluster,
) -> None:
    """A static member (group.instance.id) closes without leaving (KIP-345):
    it stays until its session times out. One session timeout after the
    close (so after the member's deadline), the group is deletable: the
    session timer fires at its deadline, not at a later tick."""
    cluster.create("adm-static", 1)
    session_ms = 1500
    consumer = cluster.consumer("adm-static-g", **{"group.instance.id": "static-1",
                                                   "session.timeout.ms": session_ms,
                                                   "heartbeat.interval.ms": 200})
    consumer.subscribe(["adm-static"])
    wait_until(lambda: len(consumer.assignment()) == 1, 30, consumer)
    consumer.close()
    closed = time.monotonic()
    busy = error_of(cluster.admin.delete_consumer_groups(["adm-static-g"])["adm-static-g"])
    assert busy.code() == KafkaError.NON_EMPTY_GROUP  # the static member stays
    time.sleep(max(0.0, closed + session_ms / 1000 - time.monotonic()))
    cluster.admin.delete_consumer_groups(["adm-static-g"])["adm-static-g"].result(20)


# -- delete records --------------------------------------------------------------------------


def test_delete_records_moves_the_log_start(cluster: Cluster) -> None:
    cluster.create("adm-del", 1)
    cluster.produce("adm-del", 10)
    tp = TopicPartition("adm-del", 0, 6)
    result = cluster.admin.delete_records([tp])[tp].result(20)
    assert result.low_watermark == 6
    consumer = cluster.consumer("adm-del-reader")
    assert consumer.get_watermark_offsets(TopicPartition("adm-del", 0), timeout=10) == (6, 10)
    consumer.assign([TopicPartition("adm-del", 0, OFFSET_BEGINNING)])
    got: list[int | None] = []
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.offset())
    consumer.close()
    assert got == [6, 7, 8, 9]
    beyond = TopicPartition("adm-del", 0, 99)
    assert error_of(cluster.admin.delete_records([beyond])[beyond]).code() == \
        KafkaError.OFFSET_OUT_OF_RANGE


# -- ACLs --------------------------------------------------------------------------------------


def _binding(name: str, principal: str, op: AclOperation,
             pattern: ResourcePatternType = ResourcePatternType.LITERAL,
             permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, permission)


def acl_filter(rtype: ResourceType, name: str | None, pattern: ResourcePatternType,
               principal: str | None = None) -> AclBindingFilter:
    """A filter matching any host, operation and permission; None matches any
    name or principal (Kafka's rule; the stubs type these as str only)."""
    return AclBindingFilter(rtype, name, pattern, principal, None,  # type: ignore[arg-type]
                            AclOperation.ANY, AclPermissionType.ANY)


def test_acls_and_dynamic_configs_survive_kill_9(cluster: Cluster) -> None:
    admin = cluster.admin
    bindings = [
        _binding("orders", "User:alice", AclOperation.READ),
        _binding("orders", "User:bob", AclOperation.WRITE),
        _binding("ord", "User:carol", AclOperation.READ, ResourcePatternType.PREFIXED),
        _binding("*", "User:dave", AclOperation.DESCRIBE),
        _binding("payments", "User:alice", AclOperation.READ,
                 permission=AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(20)
    any_topic = acl_filter(ResourceType.TOPIC, None, ResourcePatternType.ANY)
    assert len(admin.describe_acls(any_topic).result(20)) == 5

    matching = acl_filter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)
    principals = sorted(b.principal for b in admin.describe_acls(matching).result(20))
    assert principals == ["User:alice", "User:bob", "User:carol", "User:dave"]

    invalid = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "nobody", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    err = error_of(admin.create_acls([invalid])[invalid])
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Type:name" in err.str()

    # Broker and group configs, altered the same way, are journalled as well.
    _alter(cluster, _set("broker", "0", log_cleaner_backoff_ms=(SET, "5000")))
    _alter(cluster, _set("group", "adm-durable", consumer_heartbeat_interval_ms=(SET, "6000")))

    # Durable: journalled like any metadata, replayed after kill -9.
    cluster.daemon.restart(kill=True)
    assert len(admin.describe_acls(any_topic).result(30)) == 5
    broker = ConfigResource(ResourceType.BROKER, "0")
    backoff = admin.describe_configs([broker])[broker].result(30)["log.cleaner.backoff.ms"]
    assert backoff.value == "5000" and backoff.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    group = ConfigResource(ResourceType.GROUP, "adm-durable")
    assert admin.describe_configs([group])[group].result(20)[
        "consumer.heartbeat.interval.ms"].value == "6000"
    _alter(cluster, _set("broker", "0", log_cleaner_backoff_ms=(DELETE, None)))

    alice = acl_filter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice")
    removed = admin.delete_acls([alice])[alice].result(20)
    assert sorted(b.name for b in removed) == ["orders", "payments"]
    left = admin.describe_acls(any_topic).result(20)
    assert sorted(b.principal for b in left) == ["User:bob", "User:carol", "User:dave"]


def test_describe_cluster(cluster: Cluster) -> None:
    described = cluster.admin.describe_cluster(include_authorized_operations=True).result(20)
    assert described.cluster_id == "KA"
    assert [(n.id, n.host, n.port) for n in described.nodes] == [
        (0, "127.0.0.1", int(cluster.bootstrap.rsplit(":", 1)[1]))]
    assert described.controller.id == 0
    assert AclOperation.DESCRIBE in described.authorized_operations
