"""The master's refusals: one exception for every call, turned into a rich gRPC status.

Core code raises `CallError(code, message, reason)`; the service layer (`abort`) sends it with
the reason in google.rpc.ErrorInfo (agora.common.errors), which frameworks act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc

from agora.common.errors import DEFAULT_REASONS, Reason, rich_status, rich_status_proto

__all__ = ["CallError", "Reason", "abort", "naming_task", "status_details"]


class CallError(Exception):
    """A refused call: `code` is the gRPC status, the message says what to change, `reason`
    (a Reason) says what it is to a program."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or DEFAULT_REASONS.get(code, Reason.INVALID_REQUEST)
        self.metadata = metadata or {}  # the ErrorInfo's metadata (MASTER_BUSY's retry time)


@contextlib.contextmanager
def naming_task(task_id: str) -> Iterator[None]:
    """A refusal raised within names the task it is about in its metadata ("task_id"), so a
    framework can tell which of an Accept's tasks it concerns without reading the message."""
    try:
        yield
    except CallError as e:
        e.metadata.setdefault("task_id", task_id)
        raise


async def abort(context: grpc.aio.ServicerContext, error: CallError) -> None:
    """Ends the call with `error` (raises, as context.abort does)."""
    await context.abort_with_status(
        rich_status(error.code, error.message, error.reason, error.metadata)
    )


def status_details(error: CallError) -> bytes:
    """The refusal as a serialized google.rpc.Status, for a refusal carried in a message (a
    relayed agent's end, a streamed call's result) rather than as a call's status."""
    return rich_status_proto(
        error.code, error.message, error.reason, error.metadata
    ).SerializeToString()
