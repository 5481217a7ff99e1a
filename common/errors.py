"""Why the master refused a call, in a form programs can act on: google.rpc.ErrorInfo.

Every refusal carries a `Reason` in its status details (gRPC's rich error model, domain
"agora.v1"), beside the message for people. Frameworks decide on the reason, never on the
wording of the message, so a message can be reworded without breaking any framework. Shared by
the master (which sets reasons) and the SDK and CLI (which read them); no grpc server code here.
"""

from __future__ import annotations

import enum

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = ["DOMAIN", "Reason", "busy_retry_after", "error_metadata", "reason_of", "rich_status"]

DOMAIN = "agora.v1"


class Reason(enum.StrEnum):
    # The caller's framework or subscription is not (or no longer) the master's: subscribe again.
    FRAMEWORK_UNKNOWN = "FRAMEWORK_UNKNOWN"
    FRAMEWORK_REMOVED = "FRAMEWORK_REMOVED"
    STREAM_STALE = "STREAM_STALE"
    # Something the call names is not there (or not the caller's): re-plan, no re-subscribe.
    OFFER_UNKNOWN = "OFFER_UNKNOWN"
    OFFER_GONE = "OFFER_GONE"
    OFFER_NOT_YOURS = "OFFER_NOT_YOURS"
    TASK_UNKNOWN = "TASK_UNKNOWN"
    AGENT_UNKNOWN = "AGENT_UNKNOWN"
    ROLE_MISMATCH = "ROLE_MISMATCH"
    # The request itself is wrong or cannot be met; the message says what to change.
    INVALID_REQUEST = "INVALID_REQUEST"
    INSUFFICIENT_RESOURCES = "INSUFFICIENT_RESOURCES"
    NOT_FOUND = "NOT_FOUND"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    PRECONDITION_FAILED = "PRECONDITION_FAILED"
    UNAVAILABLE = "UNAVAILABLE"
    # A standby master: the metadata's "leader" (host:port, or "" while none is elected) is where
    # to go instead. Clients follow it at once.
    NOT_LEADER = "NOT_LEADER"
    # The master is behind on its own work and turns new agents away for now: the metadata's
    # "retry_after_seconds" says when to register again (agents add jitter).
    MASTER_BUSY = "MASTER_BUSY"
    # Optimistic offers (ABORTED): another framework took the offered resources first
    # (OFFER_CONFLICT), or a framework below its fair share has them on offer and keeps a short
    # priority (BELOW_SHARE_PRIORITY: the metadata's "retry_after_seconds" says for how long).
    # Nothing was launched: re-plan with fresh offers.
    OFFER_CONFLICT = "OFFER_CONFLICT"
    BELOW_SHARE_PRIORITY = "BELOW_SHARE_PRIORITY"
    # A hold (Scheduler.Hold) the master cannot take on: above the framework's fair share, or a
    # shape no agent could ever hold.
    HOLD_REFUSED = "HOLD_REFUSED"
    HOLD_UNKNOWN = "HOLD_UNKNOWN"


# The reason a refusal has when its raiser names none.
DEFAULT_REASONS = {
    grpc.StatusCode.INVALID_ARGUMENT: Reason.INVALID_REQUEST,
    grpc.StatusCode.NOT_FOUND: Reason.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: Reason.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION: Reason.PRECONDITION_FAILED,
    grpc.StatusCode.UNAVAILABLE: Reason.UNAVAILABLE,
}


def rich_status(
    code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str] | None = None
) -> grpc.Status:
    """A status whose details carry ErrorInfo(reason, domain "agora.v1", metadata)."""
    return rpc_status.to_status(rich_status_proto(code, message, reason, metadata))


def rich_status_proto(
    code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str] | None = None
) -> status_pb2.Status:
    """rich_status as the google.rpc.Status itself (serialized, grpc-status-details-bin)."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata or {})
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=code.value[0], message=message, details=[detail])


def reason_of(error: grpc.RpcError) -> str | None:
    """The ErrorInfo reason of a refusal from an Agora daemon, or None if it has none."""
    info = _error_info(error)
    return info.reason if info is not None else None


def busy_retry_after(error: BaseException) -> float | None:
    """Seconds a MASTER_BUSY refusal asks the caller to wait (None for any other error)."""
    if not isinstance(error, grpc.RpcError) or reason_of(error) != Reason.MASTER_BUSY:
        return None
    try:
        return max(0.0, float(error_metadata(error).get("retry_after_seconds", "1")))
    except ValueError:
        return 1.0


def error_metadata(error: grpc.RpcError) -> dict[str, str]:
    """The ErrorInfo metadata of a refusal from an Agora daemon ({} if it has none)."""
    info = _error_info(error)
    return dict(info.metadata) if info is not None else {}


def details_info(status_details: bytes) -> tuple[str | None, dict[str, str]]:
    """The ErrorInfo reason and metadata in a serialized google.rpc.Status (a CallResult's
    status_details, as grpc-status-details-bin): (None, {}) if it has none of ours."""
    status = status_pb2.Status()
    try:
        status.ParseFromString(status_details)
    except DecodeError:  # not ours
        return None, {}
    info = _info_in(status)
    return (info.reason, dict(info.metadata)) if info is not None else (None, {})


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:  # details that do not match the code or message: not ours
        return None
    if status is None:
        return None
    return _info_in(status)


def _info_in(status: status_pb2.Status) -> error_details_pb2.ErrorInfo | None:
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == DOMAIN:
            return info
    return None
