"""Python client library for linkd clusters, shaped like confluent-kafka.

    from admin import AdminClient, Producer, Consumer, TopicPartition

    AdminClient({"bootstrap.servers": "127.0.0.1:9701"}).create_topic("orders", 3)
    p = Producer({"bootstrap.servers": "127.0.0.1:9701"})
    p.produce("orders", key="k", value="v"); p.flush()
    c = Consumer({"bootstrap.servers": "127.0.0.1:9701", "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["orders"]); msg = c.poll(5.0)

The library talks to a cluster over gRPC only (contract: proto/ccr/v1); record
batches are built and read with linkd.core.records (a pure codec).

gRPC's C core logs failed TLS handshakes on stderr at INFO; unless
GRPC_VERBOSITY is set, it is set to ERROR before gRPC loads, so a security
mismatch reaches the caller as one CcrError (and ccr-admin's one error line).
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from admin.admin_client import (
    AdminClient,
    ClusterInfo,
    GroupInfo,
    GroupListing,
    GroupResumeInfo,
    HealthInfo,
    LinkDeletion,
    MemberInfo,
    NamespaceDescription,
    NamespaceInfo,
    OffsetInfo,
    PartitionInfo,
    PartitionLag,
    PendingChange,
    TopicInfo,
)
from admin.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)
from admin.consumer import Consumer, GroupMetadata
from admin.errors import CcrError, error_from_rpc
from admin.producer import Producer, murmur2, murmur2_partition

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "AdminClient",
    "CcrError",
    "ClusterInfo",
    "Consumer",
    "GroupInfo",
    "GroupListing",
    "GroupMetadata",
    "GroupResumeInfo",
    "HealthInfo",
    "LinkDeletion",
    "MemberInfo",
    "Message",
    "NamespaceDescription",
    "NamespaceInfo",
    "OffsetInfo",
    "PartitionInfo",
    "PartitionLag",
    "PendingChange",
    "Producer",
    "TopicInfo",
    "TopicPartition",
    "error_from_rpc",
    "murmur2",
    "murmur2_partition",
]
