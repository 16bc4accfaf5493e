"""How a core refusal travels over the Kafka protocol.

Every `ClusterError` the core raises becomes the closest Kafka error code,
chosen so that an unmodified client reacts as it would against Kafka
(retriable codes are retried, fencing codes are fatal, ...). The message goes
into the response's error message field where the API version has one.

The table below is the single source of the mapping; docs/kafka-errors.md
presents it with notes, and tests/test_kafka_errors.py checks that every
project ErrorCode has an entry here and a row there.

Three codes depend on the API that answers (Kafka itself differs there):
- NOT_READY: a partition request (Produce, Fetch, ListOffsets, ...) answers
  LEADER_NOT_AVAILABLE (clients refresh metadata and retry); a coordinator
  request (groups, transactions) answers COORDINATOR_LOAD_IN_PROGRESS (clients
  retry the coordinator).
- UNKNOWN_TOPIC: answers UNKNOWN_TOPIC_ID when the request named the topic by
  id (Fetch v13+), UNKNOWN_TOPIC_OR_PARTITION otherwise.
- RESERVED_NAMESPACE: a call on a consumer group (commits, group and offset
  deletes) answers GROUP_AUTHORIZATION_FAILED, any other call
  TOPIC_AUTHORIZATION_FAILED; the message names the namespace and link.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode as K

from linkd.core.errors import ClusterError, ErrorCode

NONE = 0

KAFKA_CODE: Mapping[ErrorCode, K] = MappingProxyType(
    {
        ErrorCode.ERROR_CODE_UNSPECIFIED: K.unknown_server_error,
        ErrorCode.INVALID_REQUEST: K.invalid_request,
        ErrorCode.INVALID_TOPIC_NAME: K.invalid_topic_exception,
        ErrorCode.UNKNOWN_TOPIC: K.unknown_topic_or_partition,
        ErrorCode.UNKNOWN_PARTITION: K.unknown_topic_or_partition,
        ErrorCode.TOPIC_ALREADY_EXISTS: K.topic_already_exists,
        ErrorCode.INVALID_PARTITIONS: K.invalid_partitions,
        ErrorCode.INVALID_CONFIG: K.invalid_config,
        ErrorCode.OFFSET_OUT_OF_RANGE: K.offset_out_of_range,
        ErrorCode.RECORD_TOO_LARGE: K.message_too_large,
        ErrorCode.CORRUPT_MESSAGE: K.corrupt_message,
        ErrorCode.INVALID_TIMESTAMP: K.invalid_timestamp,
        ErrorCode.INVALID_REQUIRED_ACKS: K.invalid_required_acks,
        ErrorCode.INVALID_RECORD: K.invalid_record,
        ErrorCode.INVALID_PRODUCER_EPOCH: K.invalid_producer_epoch,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: K.out_of_order_sequence_number,
        ErrorCode.UNKNOWN_PRODUCER_ID: K.unknown_producer_id,
        ErrorCode.INVALID_TXN_STATE: K.invalid_txn_state,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING: K.invalid_producer_id_mapping,
        ErrorCode.CONCURRENT_TRANSACTIONS: K.concurrent_transactions,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT: K.invalid_transaction_timeout,
        ErrorCode.TRANSACTION_TIMED_OUT: K.invalid_producer_epoch,
        ErrorCode.PRODUCER_FENCED: K.producer_fenced,
        ErrorCode.INVALID_GROUP_ID: K.invalid_group_id,
        ErrorCode.UNKNOWN_MEMBER_ID: K.unknown_member_id,
        ErrorCode.ILLEGAL_GENERATION: K.illegal_generation,
        ErrorCode.REBALANCE_IN_PROGRESS: K.rebalance_in_progress,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL: K.inconsistent_group_protocol,
        ErrorCode.INVALID_SESSION_TIMEOUT: K.invalid_session_timeout,
        ErrorCode.GROUP_ID_NOT_FOUND: K.group_id_not_found,
        ErrorCode.NON_EMPTY_GROUP: K.non_empty_group,
        ErrorCode.OFFSET_METADATA_TOO_LARGE: K.offset_metadata_too_large,
        ErrorCode.FENCED_INSTANCE_ID: K.fenced_instance_id,
        ErrorCode.UNSUPPORTED: K.unsupported_version,
        ErrorCode.NOT_READY: K.leader_not_available,
        ErrorCode.STORAGE_ERROR: K.kafka_storage_error,
        ErrorCode.REQUEST_TIMED_OUT: K.request_timed_out,
        ErrorCode.INVALID_NAMESPACE: K.invalid_request,
        ErrorCode.NAMESPACE_EXISTS: K.duplicate_resource,
        ErrorCode.UNKNOWN_NAMESPACE: K.resource_not_found,
        ErrorCode.NAMESPACE_ATTACHED: K.policy_violation,
        ErrorCode.RESERVED_NAMESPACE: K.topic_authorization_failed,
        ErrorCode.ALREADY_FOLLOWING: K.policy_violation,
        ErrorCode.MAPPINGS_OVERLAP: K.policy_violation,
        ErrorCode.LINK_DELETED: K.resource_not_found,
        ErrorCode.UNKNOWN_LINK: K.resource_not_found,
        ErrorCode.LINK_EXISTS: K.duplicate_resource,
        ErrorCode.LINK_UNREACHABLE: K.not_enough_replicas,
        ErrorCode.INVALID_LINK_CONFIG: K.invalid_config,
        ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE: K.topic_authorization_failed,
        ErrorCode.REPLICATED_GROUP_READ_ONLY: K.group_authorization_failed,
        ErrorCode.LAG_NOT_ZERO: K.policy_violation,
        ErrorCode.LAG_NOT_KNOWN: K.policy_violation,
        ErrorCode.FOLLOW_CYCLE: K.policy_violation,
        ErrorCode.STORAGE_REFUSED: K.kafka_storage_error,
        ErrorCode.PROCEDURE_IN_PROGRESS: K.policy_violation,
        ErrorCode.DIVERGED_LOG: K.fenced_leader_epoch,
        ErrorCode.NOT_LED_ON_LINK: K.unknown_topic_or_partition,
        ErrorCode.LINK_AUTHENTICATION_FAILED: K.cluster_authorization_failed,
        ErrorCode.LINK_NOT_FOLLOWING: K.policy_violation,
        ErrorCode.LINK_NOT_IN_SYNC: K.not_enough_replicas,
        ErrorCode.FOLLOWER_SYNCING: K.leader_not_available,
        ErrorCode.NO_SHARED_HISTORY: K.policy_violation,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED: K.topic_authorization_failed,
        ErrorCode.GROUP_AUTHORIZATION_FAILED: K.group_authorization_failed,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED: K.cluster_authorization_failed,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: K.transactional_id_authorization_failed,
    }
)

# The API-dependent exceptions described in the module docstring.
COORDINATOR_OVERRIDES: Mapping[ErrorCode, K] = MappingProxyType(
    {ErrorCode.NOT_READY: K.coordinator_load_in_progress}
)
BY_ID_OVERRIDES: Mapping[ErrorCode, K] = MappingProxyType(
    {ErrorCode.UNKNOWN_TOPIC: K.unknown_topic_id}
)
GROUP_OVERRIDES: Mapping[ErrorCode, K] = MappingProxyType(
    {ErrorCode.RESERVED_NAMESPACE: K.group_authorization_failed}
)


def kafka_code(
    exc: ClusterError, *, coordinator: bool = False, by_id: bool = False, group: bool = False
) -> int:
    """The Kafka error code (an int) for a core refusal. `group`: the call acts
    on a consumer group (commits, group deletes); `coordinator`: on a group or
    transaction coordinator; `by_id`: the request named the topic by id."""
    if group and exc.code in GROUP_OVERRIDES:
        return int(GROUP_OVERRIDES[exc.code])
    if (coordinator or group) and exc.code in COORDINATOR_OVERRIDES:
        return int(COORDINATOR_OVERRIDES[exc.code])
    if by_id and exc.code in BY_ID_OVERRIDES:
        return int(BY_ID_OVERRIDES[exc.code])
    return int(KAFKA_CODE.get(exc.code, K.unknown_server_error))


def kafka_message(exc: ClusterError) -> str:
    """The error message a client sees: the project code's name and the reason."""
    return f"{exc.code.name}: {exc.message}"
