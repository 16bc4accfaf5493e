"""Client-side errors: every refusal of a cluster becomes one `CcrError`.

A cluster refuses a call with a gRPC status whose details (the standard
``grpc-status-details-bin`` trailer, a packed ``google.rpc.Status``) carry one
``ccr.v1.ErrorDetail``. `error_from_rpc` turns a failed call into a `CcrError`
whose ``code`` is the ErrorCode name ("UNKNOWN_TOPIC", ...). A status without
details (the cluster could not be reached, a deadline passed, a server bug)
keeps the gRPC code's name ("UNAVAILABLE", "DEADLINE_EXCEEDED", ...).
"""

from __future__ import annotations

import importlib
from typing import Any

import grpc

from ccr.v1 import errors_pb2

# gRPC status codes (without an ErrorDetail) after which retrying the same call
# unchanged may succeed. A produce retried with its original sequence numbers
# is safe: the cluster answers `duplicate=true` when it already has the batch.
_RETRIABLE_GRPC_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)

# Codes after which a transactional producer must abort its transaction.
_FATAL_PRODUCER_CODES = frozenset(
    {
        "INVALID_PRODUCER_EPOCH",
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_ID_MAPPING",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    }
)

_DETAILS_KEY = "grpc-status-details-bin"


class CcrError(Exception):
    """A refusal by a cluster, or a failure to reach it.

    Attributes:
        code: the `ccr.v1.ErrorCode` name (e.g. "UNKNOWN_TOPIC"), or a gRPC
            status name ("UNAVAILABLE") when the failure carried no detail, or a
            client-side code ("TIMED_OUT", "TRANSACTION_ABORTED", ...).
        resource: what the refusal is about ("topic orders", "orders-0", ...).
        retriable: True when the same call may succeed if retried unchanged.
        message: the human-readable explanation.
        record_errors: for a refused batch, the records at fault as (index in
            the batch, reason) (KIP-467); the batch's other records were
            refused only for sharing it.
        txn_requires_abort: set by a transactional producer when the current
            transaction cannot commit any more and must be aborted.
        fatal: set by a producer that cannot continue (fenced by a newer one).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        resource: str = "",
        retriable: bool = False,
        txn_requires_abort: bool = False,
        fatal: bool = False,
        record_errors: tuple[tuple[int, str], ...] = (),
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.record_errors = record_errors
        self.code = code
        self.resource = resource
        self.retriable = retriable
        self.message = message
        self.txn_requires_abort = txn_requires_abort
        self.fatal = fatal

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"CcrError({self.code!r}, {self.message!r}, resource={self.resource!r})"

    def name(self) -> str:
        """The error code name (confluent-kafka's KafkaError.name())."""
        return self.code

    def str(self) -> str:
        """The human-readable message (confluent-kafka's KafkaError.str())."""
        return self.message

    def with_flags(self, *, txn_requires_abort: bool = False, fatal: bool = False) -> CcrError:
        """A copy of this error marked as requiring a transaction abort / fatal."""
        return CcrError(
            self.code,
            self.message,
            resource=self.resource,
            retriable=self.retriable and not fatal and not txn_requires_abort,
            txn_requires_abort=txn_requires_abort,
            fatal=fatal,
            record_errors=self.record_errors,
        )


CODE_PREFIX = "ERROR_CODE_"
"""The proto's enum values carry it (buf's rule); the names a client sees do not."""
KNOWN_CODES = frozenset(
    name.removeprefix(CODE_PREFIX)
    for name in errors_pb2.ErrorCode.keys()
    if name != "ERROR_CODE_UNSPECIFIED"
)
"""Every ErrorCode name a refusal can carry, as CcrError.code holds it."""


def code_name(code: int) -> str:
    """The ErrorCode name of a number, without the proto's ERROR_CODE_ prefix
    ("UNKNOWN_TOPIC", as Kafka names it); unknown numbers keep their value."""
    try:
        name = str(errors_pb2.ErrorCode.Name(code))  # type: ignore[arg-type]
    except ValueError:
        return f"{CODE_PREFIX}{code}"
    return name.removeprefix(CODE_PREFIX) if name != "ERROR_CODE_UNSPECIFIED" else name


def from_detail(detail: errors_pb2.ErrorDetail) -> CcrError:
    """The CcrError of an inline ErrorDetail (per-partition fetch errors)."""
    return CcrError(
        code_name(int(detail.code)),
        detail.message or code_name(int(detail.code)),
        resource=detail.resource,
        retriable=bool(detail.retriable),
        record_errors=tuple((int(e.batch_index), e.message) for e in detail.record_errors),
    )


def _detail_from_trailers(metadata: Any) -> errors_pb2.ErrorDetail | None:
    """The ErrorDetail packed in a status's trailers, if any."""
    # Imported lazily: google.rpc ships with grpcio-status / googleapis-common-protos.
    status_pb2: Any = importlib.import_module("google.rpc.status_pb2")

    if not metadata:
        return None
    for key, value in metadata:
        if key != _DETAILS_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        for packed in status.details:
            detail = errors_pb2.ErrorDetail()
            if packed.Is(errors_pb2.ErrorDetail.DESCRIPTOR):
                packed.Unpack(detail)
                return detail
    return None


def error_from_rpc(exc: BaseException, target: str = "") -> CcrError:
    """Turns a failed gRPC call (a `grpc.RpcError`) into a `CcrError`.

    `target` is the HOST:PORT the call went to; it names the cluster in the
    message when the cluster could not be reached at all.
    """
    if isinstance(exc, CcrError):
        return exc
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    trailers_fn = getattr(exc, "trailing_metadata", None)
    status_code: grpc.StatusCode | None = None
    if callable(code_fn):
        try:
            status_code = code_fn()
        except Exception:
            status_code = None
    text = ""
    if callable(details_fn):
        try:
            text = details_fn() or ""
        except Exception:
            text = ""
    detail: errors_pb2.ErrorDetail | None = None
    if callable(trailers_fn):
        try:
            detail = _detail_from_trailers(trailers_fn())
        except Exception:
            detail = None
    if detail is not None:
        err = from_detail(detail)
        if not err.message:
            err.message = text
        return err
    if status_code is None:
        return CcrError("UNKNOWN", text or str(exc) or type(exc).__name__)
    name = status_code.name
    retriable = status_code in _RETRIABLE_GRPC_CODES
    if status_code is grpc.StatusCode.UNAVAILABLE:
        where = target or "the configured address"
        return CcrError(
            "UNAVAILABLE",
            f"cannot reach cluster at {where}: {text or 'unavailable'}",
            resource=target,
            retriable=True,
        )
    if status_code is grpc.StatusCode.DEADLINE_EXCEEDED:
        where = f" (cluster at {target})" if target else ""
        return CcrError(
            "DEADLINE_EXCEEDED",
            f"no answer before the deadline{where}: {text or 'deadline exceeded'}",
            resource=target,
            retriable=True,
        )
    return CcrError(
        name, text or name.lower().replace("_", " "), resource=target, retriable=retriable
    )


def is_fatal_producer_code(code: str) -> bool:
    """Codes after which a producer cannot continue (it was fenced)."""
    return code in _FATAL_PRODUCER_CODES
