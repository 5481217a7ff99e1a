"""The SDK's errors: what a failed call to the master raises (SchedulerError), with the
gRPC status code, the master's message, and the reason a program acts on."""

from __future__ import annotations

import grpc

from agora.common.errors import error_metadata, reason_of

__all__ = ["TRANSIENT_CODES", "OfferConflict", "SchedulerError"]

# Codes after which trying again later can succeed: the master is down, restarting or busy.
TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


class SchedulerError(Exception):
    """A call to the master failed; `code` is the gRPC status code, `message` says why (for
    people), `reason` what it is (for programs: a Reason from agora.common.errors, or None
    when the failure did not come from the master, e.g. a lost connection)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = metadata or {}  # the ErrorInfo's metadata, e.g. retry_after_seconds

    @classmethod
    def from_rpc(cls, error: grpc.aio.AioRpcError) -> SchedulerError:
        return cls(error.code(), error.details() or "", reason_of(error), error_metadata(error))

    @property
    def transient(self) -> bool:
        return self.code in TRANSIENT_CODES


class OfferConflict(SchedulerError):
    """An optimistic offer lost (master --offer-mode optimistic): another framework's Accept
    took its resources first, or a framework below its fair share had priority on them for a
    moment (`retry_after` seconds). Nothing was launched: re-plan with fresh offers, which the
    master sends at once for what is left."""

    def __init__(self, error: SchedulerError) -> None:
        super().__init__(error.code, error.message, error.reason, error.metadata)
        retry = error.metadata.get("retry_after_seconds")
        self.retry_after = float(retry) if retry else None

    @property
    def transient(self) -> bool:
        return False  # refused outright: nothing was launched, nothing to find out
