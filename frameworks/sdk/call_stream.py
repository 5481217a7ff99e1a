"""Scheduler calls on the master's Calls stream (scheduler.proto), for GrpcSchedulerTransport.

A unary call costs a framework about four times what a stream message does, and the master six
(grpc.aio), and a framework under load makes one or two a task. Here Accept, Decline, Revive,
Suppress, Kill, Acknowledge and Reconcile go on one stream instead: each gets an id, what
queues while the stream is busy goes in one CallBatch, and each caller awaits its own
CallResult, which fails exactly as the unary call would (the same SchedulerError: code,
message, reason and metadata). If the stream breaks, every call waiting on it fails with the
stream's error (as unary calls in flight fail when their connection does) and the next call
opens a new stream.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf.message import Message

from agora.common.batches import BATCH_BYTES, hold_after
from agora.common.errors import details_info
from agora.frameworks.sdk.errors import SchedulerError
from agora.v1 import scheduler_pb2

__all__ = ["MAX_CALLS_PER_BATCH", "STREAMED", "STREAM_CALL_BYTES", "CallStream"]

# The unary methods the stream carries: gRPC name -> the Call's field.
STREAMED = {
    "Accept": "accept",
    "Decline": "decline",
    "Revive": "revive",
    "Suppress": "suppress",
    "Kill": "kill",
    "Acknowledge": "acknowledge",
    "Reconcile": "reconcile",
}
_RESPONSES = {method: getattr(scheduler_pb2, f"{method}Response") for method in STREAMED}
_CODES = {code.value[0]: code for code in grpc.StatusCode}
MAX_CALLS_PER_BATCH = 1000  # the master's limit (master/call_stream.py)
# A call this big goes as a unary call: alone in its own message, it cannot make a batch too big
# for the master to take (64 MiB), which would fail every call in flight on the stream.
STREAM_CALL_BYTES = 8 * 1024 * 1024


class CallStream:
    """One Calls stream on `stub`'s channel. `on_error` learns from the stream's failure (a
    standby's refusal names the leader). `ended` is set once the stream is over."""

    def __init__(self, stub, on_error: Callable[[grpc.aio.AioRpcError], None]) -> None:
        self.stub = stub
        self.ended: SchedulerError | None = None
        self._on_error = on_error
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._outbox: asyncio.Queue[scheduler_pb2.Call | None] = asyncio.Queue()
        self._call = stub.Calls(self._requests())
        # Nothing is written before the master has answered the stream with its headers: a
        # master that does not know Calls ends it at once, and a call written meanwhile could
        # fail with a write error (INTERNAL) instead of UNIMPLEMENTED, which says "use unary".
        self._opened = asyncio.ensure_future(self._call.initial_metadata())
        self._reader = asyncio.create_task(self._read())

    async def call(self, method: str, request: Message, timeout: float) -> Message:
        """Makes `method` (one of STREAMED) on the stream; raises SchedulerError as the unary
        call would, or the stream's error if it breaks first."""
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._until_open()
                if self.ended is not None:
                    raise _copy(self.ended)
                self._pending[call_id] = future
                call = scheduler_pb2.Call(id=call_id)
                getattr(call, STREAMED[method]).CopyFrom(request)
                self._outbox.put_nowait(call)
                result = await future
        except TimeoutError:
            # Answers come in order: the calls behind this one would wait as long. The stream
            # is dropped (its calls fail) and the next call dials a new one.
            error = SchedulerError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the master did not answer {method} within {timeout:g} s",
            )
            self._pending.pop(call_id, None)
            self._end(error)
            self._call.cancel()
            raise _copy(error) from None
        finally:
            self._pending.pop(call_id, None)
        if result.code != 0:
            reason, metadata = details_info(result.status_details)
            code = _CODES.get(result.code, grpc.StatusCode.UNKNOWN)
            raise SchedulerError(code, result.message, reason, metadata)
        return _RESPONSES[method]()

    async def _until_open(self) -> None:
        """Waits until the master has answered the stream, or the stream has ended (`ended`)."""
        for step in (self._opened, self._reader):
            if self.ended is not None:
                return
            try:
                await asyncio.shield(step)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                if not step.done():
                    raise  # the caller itself is being cancelled
            if step is self._opened and not self._call.done():
                return  # open: the reader reports whatever happens next
        if self.ended is None:  # the reader was stopped before it could say why
            self._end(SchedulerError(grpc.StatusCode.CANCELLED, "the call stream was closed"))

    async def close(self) -> None:
        """Ends the stream; calls waiting on it fail with CANCELLED."""
        self._end(SchedulerError(grpc.StatusCode.CANCELLED, "the call stream was closed"))
        self._call.cancel()
        self._reader.cancel()
        self._opened.cancel()
        await asyncio.gather(self._reader, self._opened, return_exceptions=True)

    async def _requests(self) -> AsyncIterator[scheduler_pb2.CallBatch]:
        """What queued while the last batch was written, in order, in one CallBatch (at most
        MAX_CALLS_PER_BATCH calls and, unless a call alone is bigger, BATCH_BYTES)."""
        carried: scheduler_pb2.Call | None = None
        hold_until = 0.0
        while True:
            first = carried if carried is not None else await self._outbox.get()
            carried = None
            if first is None:
                return
            # One turn of the loop first: what the callbacks ready now would send (the rest of
            # a batch of events being handled) goes in this message too, a few us later; after
            # a batch of three or more calls, the hold of common/batches.hold_after as well.
            await asyncio.sleep(max(0.0, hold_until - time.monotonic()))
            if first.id not in self._pending:
                continue  # its caller gave up (timed out or cancelled) before it was sent
            calls, size, ending = [first], first.ByteSize(), False
            while len(calls) < MAX_CALLS_PER_BATCH and not self._outbox.empty():
                call = self._outbox.get_nowait()
                if call is None:
                    ending = True
                    break
                if call.id not in self._pending:
                    continue
                size += call.ByteSize()
                if size > BATCH_BYTES:
                    carried = call  # the first of the next batch
                    break
                calls.append(call)
            hold_until = time.monotonic() + hold_after(len(calls))
            yield scheduler_pb2.CallBatch(calls=calls)
            if ending:
                return

    async def _read(self) -> None:
        error = SchedulerError(grpc.StatusCode.UNAVAILABLE, "the master ended the call stream")
        try:
            async for batch in self._call:
                for result in batch.results:
                    future = self._pending.get(result.id)
                    if future is not None and not future.done():
                        future.set_result(result)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:  # that only says: use unary calls
                self._on_error(e)
            error = SchedulerError.from_rpc(e)
        except asyncio.CancelledError:
            # The call was cancelled under us (its channel closed: a new leader) or closed.
            error = SchedulerError(grpc.StatusCode.UNAVAILABLE, "the call stream was cut")
        finally:
            self._end(error)

    def _end(self, error: SchedulerError) -> None:
        if self.ended is None:
            self.ended = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(_copy(error))
        self._pending.clear()
        self._outbox.put_nowait(None)


def _copy(error: SchedulerError) -> SchedulerError:
    """A fresh exception for each caller (one raised in many places collects their frames)."""
    return SchedulerError(error.code, error.message, error.reason, error.metadata)
