"""Refusals of the cluster core, mirrored from proto/ccr/v1/errors.proto.

The core raises `ClusterError(code, resource, message)`; the shells map it to
a gRPC status (linkd/grpc_errors.py) or a Kafka error code. The numbers here
must equal the proto enum's: tests/test_error_codes.py checks it, so the rule
that names an error lives in the proto and this file only mirrors it for a
core that must not import generated code.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ErrorCode(enum.IntEnum):
    ERROR_CODE_UNSPECIFIED = 0
    INVALID_REQUEST = 1
    INVALID_TOPIC_NAME = 2
    UNKNOWN_TOPIC = 3
    UNKNOWN_PARTITION = 4
    TOPIC_ALREADY_EXISTS = 5
    INVALID_PARTITIONS = 6
    INVALID_CONFIG = 7
    OFFSET_OUT_OF_RANGE = 10
    RECORD_TOO_LARGE = 11
    CORRUPT_MESSAGE = 12
    INVALID_TIMESTAMP = 13
    INVALID_REQUIRED_ACKS = 14
    INVALID_RECORD = 15
    INVALID_PRODUCER_EPOCH = 20
    OUT_OF_ORDER_SEQUENCE_NUMBER = 21
    UNKNOWN_PRODUCER_ID = 22
    INVALID_TXN_STATE = 23
    INVALID_PRODUCER_ID_MAPPING = 24
    CONCURRENT_TRANSACTIONS = 25
    INVALID_TRANSACTION_TIMEOUT = 26
    TRANSACTION_TIMED_OUT = 27
    PRODUCER_FENCED = 28
    INVALID_GROUP_ID = 30
    UNKNOWN_MEMBER_ID = 31
    ILLEGAL_GENERATION = 32
    REBALANCE_IN_PROGRESS = 33
    INCONSISTENT_GROUP_PROTOCOL = 34
    INVALID_SESSION_TIMEOUT = 35
    GROUP_ID_NOT_FOUND = 36
    NON_EMPTY_GROUP = 37
    OFFSET_METADATA_TOO_LARGE = 38
    FENCED_INSTANCE_ID = 39
    UNSUPPORTED = 50
    NOT_READY = 51
    STORAGE_ERROR = 52
    REQUEST_TIMED_OUT = 53
    INVALID_NAMESPACE = 60
    NAMESPACE_EXISTS = 61
    UNKNOWN_NAMESPACE = 62
    NAMESPACE_ATTACHED = 63
    RESERVED_NAMESPACE = 64
    ALREADY_FOLLOWING = 65
    MAPPINGS_OVERLAP = 66
    UNKNOWN_LINK = 70
    LINK_EXISTS = 71
    LINK_UNREACHABLE = 72
    INVALID_LINK_CONFIG = 73
    FOLLOWER_TOPIC_NOT_WRITABLE = 74
    REPLICATED_GROUP_READ_ONLY = 75
    LAG_NOT_ZERO = 76
    DIVERGED_LOG = 77
    LINK_AUTHENTICATION_FAILED = 78
    LINK_NOT_FOLLOWING = 79
    LINK_NOT_IN_SYNC = 80
    FOLLOWER_SYNCING = 81
    LINK_DELETED = 82
    NOT_LED_ON_LINK = 83
    NO_SHARED_HISTORY = 90
    TOPIC_AUTHORIZATION_FAILED = 100
    GROUP_AUTHORIZATION_FAILED = 101
    CLUSTER_AUTHORIZATION_FAILED = 102
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 103
    LAG_NOT_KNOWN = 110
    FOLLOW_CYCLE = 114
    STORAGE_REFUSED = 115
    PROCEDURE_IN_PROGRESS = 116


RETRIABLE = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.NOT_READY,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.LINK_UNREACHABLE,
        ErrorCode.LINK_NOT_IN_SYNC,
        ErrorCode.FOLLOWER_SYNCING,
    }
)


# A refusal travels in gRPC trailers (8 KiB by default) and Kafka error
# messages: a client-chosen name of any length must not make it undeliverable.
MAX_RESOURCE_CHARS = 300
MAX_MESSAGE_CHARS = 1_500


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 30]}...({len(text) - limit + 30} chars cut)"


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record of a produced batch (Kafka's KIP-467): its index in
    the batch and why, so a client can tell it from the records refused only
    because they shared its batch."""

    batch_index: int
    message: str


class ClusterError(Exception):
    """A refusal: nothing was changed. `resource` names what it is about;
    `record_errors`, for a refused batch, the records that broke a rule."""

    def __init__(
        self,
        code: ErrorCode,
        resource: str,
        message: str,
        *,
        record_errors: tuple[RecordError, ...] = (),
    ) -> None:
        resource = _clip(resource, MAX_RESOURCE_CHARS)
        message = _clip(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.code = code
        self.resource = resource
        self.message = message
        self.record_errors = record_errors

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE

    def __repr__(self) -> str:
        return f"ClusterError({self.code.name}, {self.resource!r}, {self.message!r})"
