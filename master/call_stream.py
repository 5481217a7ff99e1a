"""Scheduler.Calls: a framework's unary calls carried on one stream, answered in order.

A unary call costs grpc.aio about six times what one stream message does, on each side (a new
HTTP/2 stream, its headers and trailers, a task on the server), and a framework launching
tasks quickly makes one or two a task (Accept, Acknowledge). On the Calls stream the same
calls cost a share of a message: a CallBatch carries what the framework queued while the
stream was busy, and one ResultBatch answers it.

Each call runs the very function its unary handler runs (master/scheduler_service.py), with
the same checks: the request's ids and names (limits.check_request_strings, which the
RequestLimits interceptor applies to unary calls), the method's own limits, the framework
bound to the caller, the ACLs. Its CallResult carries the status the unary call would have
ended with, reason included, and the handled-calls metric counts it under its method's name
as it would a unary call.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import structlog

from agora.common.credentials import caller_principal
from agora.master import limits
from agora.master.errors import CallError, status_details
from agora.master.turns import Turns
from agora.v1 import scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["MAX_CALLS_PER_BATCH", "CallStream", "CountCall"]

SERVICE = "agora.v1.Scheduler"
MAX_CALLS_PER_BATCH = 1000

# (service, method, code name): counts a call handled (common/metrics.GrpcMetrics.count).
CountCall = Callable[[str, str, str], None]
# A call's handler: (request, the caller's principal) -> None, raising CallError.
Handle = Callable[[object, str], None]


class CallStream:
    """Serves Calls streams with `handlers`: the Call's oneof field name -> (method, handler)."""

    def __init__(self, handlers: dict[str, tuple[str, Handle]], count: CountCall | None) -> None:
        self.handlers = handlers
        self._count = count

    async def serve(self, requests, context: grpc.aio.ServicerContext) -> None:
        principal = caller_principal(context)
        # Headers at once: the SDK writes no call until it has them, so a call is never lost
        # to the race between its write and a refusal of the stream.
        await context.send_initial_metadata(())
        async for batch in requests:
            if len(batch.calls) > MAX_CALLS_PER_BATCH:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a CallBatch carries at most {MAX_CALLS_PER_BATCH} calls, got "
                    f"{len(batch.calls)}: send them in several",
                )
            results = []
            turns = Turns()  # calls run back to back; a long batch lets the loop turn
            for call in batch.calls:
                if turns.due():
                    await turns.take()
                results.append(self.run(call, principal))
            del batch  # not held (with its protobuf arena) while the results are written
            await context.write(scheduler_pb2.ResultBatch(results=results))

    def run(self, call: scheduler_pb2.Call, principal: str) -> scheduler_pb2.CallResult:
        """One call, as its unary handler would run it; never raises."""
        kind = call.WhichOneof("call")
        entry = self.handlers.get(kind) if kind is not None else None
        if entry is None:
            # UNIMPLEMENTED: a caller of a later version may carry a call this master does not
            # know (an unknown field); it then makes that call unary.
            return _refusal(
                call.id,
                CallError(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"call {call.id} names no call this master knows: set one of "
                    f"{', '.join(self.handlers)}",
                ),
            )
        method, handle = entry
        try:
            request = getattr(call, kind)
            limits.check_request_strings(request)
            handle(request, principal)
        except CallError as e:
            self._counted(method, e.code)
            return _refusal(call.id, e)
        except Exception:  # noqa: BLE001 - one call's bug must not end the others' stream
            log.exception("a streamed call failed", method=method)
            self._counted(method, grpc.StatusCode.UNKNOWN)
            return scheduler_pb2.CallResult(
                id=call.id,
                code=grpc.StatusCode.UNKNOWN.value[0],
                message=f"the master failed on this {method}: see its log",
            )
        self._counted(method, grpc.StatusCode.OK)
        return scheduler_pb2.CallResult(id=call.id)

    def _counted(self, method: str, code: grpc.StatusCode) -> None:
        if self._count is not None:
            self._count(SERVICE, method, code.name)


def _refusal(call_id: int, error: CallError) -> scheduler_pb2.CallResult:
    return scheduler_pb2.CallResult(
        id=call_id,
        code=error.code.value[0],
        message=error.message,
        status_details=status_details(error),
    )
