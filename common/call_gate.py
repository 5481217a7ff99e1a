"""The door of a server, before a request is read: whether the caller may call at all, how many
calls and streams it has open, how large a request its method takes; and nothing of a refused
call kept.

gRPC reads a unary request whole (up to the server's receive limit, 64 MB) and parses it before
any handler or interceptor can look at it. So a certificate that no ACL rule names could send
16 concurrent 60 MB UpdateWeight calls, all refused, and take the master from 72 MB to 2.2 GB,
most of it kept: a refused request stayed in cyclic garbage that the master (which collects
rarely, master/heap.py) did not free for minutes (issue 37).

`CallGate` serves every unary-request method as a request-streaming one (the same bytes on the
wire: a client's unary call is a stream of one message), so its handler runs before anything is
read. There it refuses a caller the authorizer does not know (`knows(principal)`: named by no
rule) and a principal past its share of concurrent calls or streams; only then does it read
the message, as raw bytes, refuse it if it is larger than its method takes (RESOURCE_EXHAUSTED,
before parsing), and parse it. A refused call leaves nothing behind: the frames of the
handlers it passed through are cleared, so no cycle holds its request.
"""

from __future__ import annotations

import asyncio
import ctypes
import traceback
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

import grpc

from agora.common.credentials import caller_principal

__all__ = ["CallGate", "GateLimits", "release_freed_memory"]

# Seconds after a refusal for size before freed memory is given back (the burst's others end).
TRIM_AFTER = 0.2
# Health checks and reflection answer anyone who reaches the port (with --tokens no client
# certificate is asked for): their requests are small, and their streams few.
OPEN_REQUEST_BYTES = 64 * 1024
OPEN_STREAMS = 16


def release_freed_memory() -> None:
    """glibc's malloc_trim(0): hands the free parts of the heap's arenas back to the system.
    A no-op where the C library has no such call."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if callable(_malloc_trim):
        _malloc_trim(0)


_malloc_trim: Callable[[int], int] | bool | None = None  # None: not looked up yet


@dataclass(frozen=True)
class GateLimits:
    """What one server lets a caller do. 0: no bound."""

    # Largest request of a method not in `large_methods` (bytes); the others take up to the
    # server's own receive limit.
    small_request_bytes: int = 4 * 1024 * 1024
    # Full method names ("/agora.v1.Scheduler/Accept") that take large requests.
    large_methods: Collection[str] = ()
    # Per named principal (an anonymous caller, without TLS, is on loopback: not bounded).
    calls_per_principal: int = 64
    streams_per_principal: int = 256


class CallGate(grpc.aio.ServerInterceptor):
    """See the module's docstring. `knows(principal)`: whether the caller may call this server
    at all (None: everyone may); `on_refused(principal, method, reason, message)` counts and
    logs (reason: unknown_principal, too_many_calls, too_many_streams or too_large)."""

    # Health checks and reflection stay open, as they are on every server.
    OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")

    def __init__(
        self,
        limits: GateLimits,
        knows: Callable[[str], bool] | None = None,
        on_refused: Callable[[str, str, str, str], None] | None = None,
    ) -> None:
        self.limits = limits
        self._knows = knows
        self._on_refused = on_refused
        self.calls: Counter[str] = Counter()  # open unary calls by principal
        self.streams: Counter[str] = Counter()  # open streaming calls by principal
        self.open_streams = 0  # health and reflection streams, all callers
        self._trimming = False  # a trim of the heap is scheduled

    async def _refuse(
        self, context, principal: str, method: str, reason: str, code, message: str
    ) -> None:
        if self._on_refused is not None:
            self._on_refused(principal, method, reason, message)
        await context.abort(code, message)

    async def _admit(self, context, method: str, streaming: bool, open_method: bool) -> None:
        """Returns once the caller may go on; else aborts the call. The slot it takes is
        given back when the call ends, however it ends (a done callback: a stream's
        generator may be left suspended at a yield when its client goes)."""
        if open_method:
            # Health and reflection: anyone who reached the port, but a bounded number of
            # streams all told (their requests are bounded by OPEN_REQUEST_BYTES).
            if streaming:
                if self.open_streams >= OPEN_STREAMS:
                    await self._refuse(
                        context, "", method, "too_many_streams",
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"{OPEN_STREAMS} health or reflection streams are open; try later",
                    )  # fmt: skip
                self.open_streams += 1
                context.add_done_callback(_once(self._leave_open))
            return
        principal = caller_principal(context)
        if self._knows is not None and not self._knows(principal):
            await self._refuse(
                context,
                principal,
                method,
                "unknown_principal",
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal or 'an anonymous caller'} is named by no rule of this server's "
                f"ACLs, so it may not call {method.rsplit('.', 1)[-1].replace('/', '.')} (nor "
                "anything else here): nothing it sends is read",
            )
        if not principal:
            return
        counts = self.streams if streaming else self.calls
        bound = self.limits.streams_per_principal if streaming else self.limits.calls_per_principal
        if bound and counts[principal] >= bound:
            what = "streams" if streaming else "calls"
            await self._refuse(
                context,
                principal,
                method,
                f"too_many_{what}",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{principal} has {counts[principal]} {what} open to this server; at most "
                f"{bound} at once (close some, or raise --max-{what}-per-principal)",
            )
        counts[principal] += 1
        context.add_done_callback(_once(lambda: self._leave(counts, principal)))

    def _give_back_soon(self) -> None:
        """Returns freed memory to the system shortly after a request refused for its size.
        gRPC reads a request in many small buffers, and glibc keeps what they freed in its
        arenas: 16 refused 60 MB calls left a master of 73 MB at 374 MB; malloc_trim brought
        it back to 75 MB. Once for a burst of refusals, not once each."""
        if self._trimming:
            return
        self._trimming = True

        def trim() -> None:
            self._trimming = False
            release_freed_memory()

        asyncio.get_running_loop().call_later(TRIM_AFTER, trim)

    @staticmethod
    def _leave(counts: Counter[str], principal: str) -> None:
        counts[principal] -= 1
        if counts[principal] <= 0:
            del counts[principal]

    def _leave_open(self) -> None:
        self.open_streams -= 1

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        open_method = method.startswith(self.OPEN)
        if handler.request_streaming:
            return self._streams(handler, method, open_method)
        return self._reads_after_admission(handler, method, open_method)

    def _streams(self, handler, method: str, open_method: bool):
        """A request-streaming method: its handler reads; admit it before it can."""
        kind = "stream_stream" if handler.response_streaming else "stream_unary"
        inner = getattr(handler, kind)
        gate = self
        if open_method:  # each of its messages bounded before it is parsed
            handler = handler._replace(
                request_deserializer=_bounded(handler.request_deserializer, OPEN_REQUEST_BYTES)
            )

        if handler.response_streaming and _is_async_gen(inner):

            async def generated(requests, context):
                await gate._admit(context, method, True, open_method)
                async for reply in inner(requests, context):
                    yield reply

            return handler._replace(**{kind: generated})

        async def called(requests, context):
            await gate._admit(context, method, True, open_method)
            try:
                return await inner(requests, context)
            except BaseException as e:
                _forget(e)
                raise

        return handler._replace(**{kind: called})

    def _reads_after_admission(self, handler, method: str, open_method: bool):
        """A unary-request method served as a request-streaming one: admitted, then its one
        message read as bytes, its size checked, parsed, and handed to the real handler."""
        if open_method:
            limit = OPEN_REQUEST_BYTES
        else:
            large = method in self.limits.large_methods
            limit = 0 if large else self.limits.small_request_bytes
        parse = handler.request_deserializer
        streaming = handler.response_streaming
        gate = self

        async def read(requests, context):
            raw = await context.read()
            if raw is grpc.aio.EOF:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call sent no request")
            size = len(raw)
            if limit and size > limit:
                raw = None  # not held while the refusal goes out
                gate._give_back_soon()
                await gate._refuse(
                    context,
                    caller_principal(context),
                    method,
                    "too_large",
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{method.rsplit('/', 1)[-1]}: a request of {size} bytes; this call takes "
                    f"at most {limit}",
                )
            try:
                return parse(raw) if parse is not None else raw
            except Exception:  # noqa: BLE001 - any parse failure is the caller's
                raw = None
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "the request is not a valid message"
                )

        if streaming:
            inner_stream = handler.unary_stream
            if _is_async_gen(inner_stream):

                async def stream(requests, context):
                    await gate._admit(context, method, True, open_method)
                    request = await read(requests, context)
                    async for reply in inner_stream(request, context):
                        yield reply

                behavior = stream
            else:

                async def written(requests, context):  # a stream written with context.write()
                    await gate._admit(context, method, True, open_method)
                    request = await read(requests, context)
                    await inner_stream(request, context)

                behavior = written
            return grpc.stream_stream_rpc_method_handler(
                behavior,
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )

        inner_unary = handler.unary_unary

        async def unary(requests, context):
            await gate._admit(context, method, False, open_method)
            try:
                request = await read(requests, context)
                return await inner_unary(request, context)
            except BaseException as e:
                request = None
                _forget(e)
                raise

        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=None, response_serializer=handler.response_serializer
        )


def _once(action: Callable[[], None]) -> Callable[[object], None]:
    """A done callback that runs `action` once, whatever gRPC passes it."""
    done: list[bool] = []

    def callback(_context: object) -> None:
        if not done:
            done.append(True)
            action()

    return callback


def _bounded(parse, limit: int):
    """`parse` of a message no larger than `limit` bytes (ValueError otherwise: gRPC ends the
    call rather than parse it)."""

    def parse_bounded(raw: bytes):
        if len(raw) > limit:
            raise ValueError(f"a message of {len(raw)} bytes; at most {limit}")
        return parse(raw) if parse is not None else raw

    return parse_bounded


def _is_async_gen(function) -> bool:
    import inspect

    return inspect.isasyncgenfunction(function)


def _forget(error: BaseException) -> None:
    """Clears the locals of the frames a failed call passed through (the request among them),
    so that the exception, kept by gRPC or a log, holds no request in a cycle."""
    if error.__traceback__ is not None:
        traceback.clear_frames(error.__traceback__)
