"""How a core refusal travels over gRPC.

The status code gives generic clients the right idea (NOT_FOUND for unknown
topics, INVALID_ARGUMENT for bad input, ABORTED for retriable conflicts, ...);
the details carry the exact `ccr.v1.ErrorDetail` (google.rpc.Status in the
`grpc-status-details-bin` trailer) that the client library decodes.
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc import aio
from grpc_status import rpc_status

from ccr.v1 import errors_pb2
from linkd.core.errors import ClusterError, ErrorCode

_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNKNOWN_TOPIC: grpc.StatusCode.NOT_FOUND,
    ErrorCode.UNKNOWN_PARTITION: grpc.StatusCode.NOT_FOUND,
    ErrorCode.GROUP_ID_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.TOPIC_ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.OFFSET_OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    ErrorCode.INVALID_PRODUCER_EPOCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_PRODUCER_ID: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_TXN_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.TRANSACTION_TIMED_OUT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_MEMBER_ID: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.ILLEGAL_GENERATION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.NON_EMPTY_GROUP: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.CONCURRENT_TRANSACTIONS: grpc.StatusCode.ABORTED,
    ErrorCode.REBALANCE_IN_PROGRESS: grpc.StatusCode.ABORTED,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.NOT_READY: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.STORAGE_ERROR: grpc.StatusCode.INTERNAL,
    ErrorCode.REQUEST_TIMED_OUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.UNKNOWN_NAMESPACE: grpc.StatusCode.NOT_FOUND,
    ErrorCode.UNKNOWN_LINK: grpc.StatusCode.NOT_FOUND,
    ErrorCode.NAMESPACE_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.LINK_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.NAMESPACE_ATTACHED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.RESERVED_NAMESPACE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.ALREADY_FOLLOWING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.REPLICATED_GROUP_READ_ONLY: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LAG_NOT_ZERO: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LAG_NOT_KNOWN: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.DIVERGED_LOG: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.NOT_LED_ON_LINK: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LINK_UNREACHABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.LINK_AUTHENTICATION_FAILED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.LINK_NOT_FOLLOWING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LINK_NOT_IN_SYNC: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.FOLLOWER_SYNCING: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.NO_SHARED_HISTORY: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.FOLLOW_CYCLE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.STORAGE_REFUSED: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.PROCEDURE_IN_PROGRESS: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
}


def status_code_for(code: ErrorCode) -> grpc.StatusCode:
    """INVALID_ARGUMENT unless the table says otherwise (most codes are bad input)."""
    return _STATUS.get(code, grpc.StatusCode.INVALID_ARGUMENT)


def to_status(exc: ClusterError, status: grpc.StatusCode | None = None) -> grpc.Status:
    code = status or status_code_for(exc.code)
    detail = errors_pb2.ErrorDetail(
        code=errors_pb2.ErrorCode.ValueType(int(exc.code)),
        resource=exc.resource,
        retriable=exc.retriable,
        message=exc.message,
        record_errors=[
            errors_pb2.RecordError(batch_index=e.batch_index, message=e.message)
            for e in exc.record_errors
        ],
    )
    packed = any_pb2.Any()
    packed.Pack(detail)
    message = f"{exc.code.name}: {exc.message}"
    return rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=message, details=[packed])
    )


async def abort_with_error(
    context: aio.ServicerContext[Any, Any], exc: ClusterError, status: grpc.StatusCode | None = None
) -> NoReturn:
    # abort_with_status exists on grpc.aio contexts but not in the typing stubs.
    await context.abort_with_status(to_status(exc, status))  # type: ignore[attr-defined]
    raise AssertionError("unreachable: abort_with_status raises")
