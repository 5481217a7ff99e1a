"""The fence: nothing leaves a master elected on ZooKeeper once it cannot prove it still leads.

A leader paused past its ZooKeeper session (SIGSTOP, a frozen VM) and then resumed used to
answer Accepts, send offers and send RunTask for a few hundred milliseconds, until its
ZooKeeper client noticed the session was gone (issue 38). Now every gRPC call to the master
passes `FenceInterceptor`, which checks the `Fence` (its lease, common/lease.py, and whether it
has stepped down) when the call arrives, again before a unary answer leaves, before each
message of a response stream and before each `context.write` of a bidirectional stream (the
agents' links, the frameworks' Calls, the relays). A check that fails refuses the call with
UNAVAILABLE / NOT_LEADER (clients look for the leader again) and steps the master down.

The master's other actions (offer cycles, timers) only send through those streams, so they are
fenced with them; the registry's ZooKeeper writes are fenced on the election znode as well
(master/zk_store.py). A master alone (no --zk) has no fence.

The batch and services daemons run as highly available sets (frameworks/sdk/leadership.py)
use the same fence on their APIs, and fence their state's log on their election znode.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable

import grpc

from agora.common.errors import Reason, rich_status
from agora.common.lease import Lease, lease_clock

__all__ = ["Fence", "FenceInterceptor"]


class Fence:
    """Whether this master may still act as leader: it has not stepped down and its lease
    holds. `lose(reason)` is the one way to step down: the fence closes first (from any thread),
    then `on_lost(reason)` runs, once."""

    def __init__(
        self,
        lease: Lease,
        on_lost: Callable[[str], None],
        clock: Callable[[], float] = lease_clock,
        what: str = "the master",
    ) -> None:
        self.lease = lease
        self.what = what  # names the daemon in refusals
        self._on_lost = on_lost
        self._clock = clock
        self.lost = False
        self.reason = ""
        self._lock = threading.Lock()

    def holds(self) -> bool:
        if self.lost:
            return False
        if self.lease.holds(self._clock()):
            return True
        self.lose(f"the leader lease ran out ({self.lease.duration:.2f} s without ZooKeeper)")
        return False

    def lose(self, reason: str) -> None:
        with self._lock:
            if self.lost:
                return
            self.lost, self.reason = True, reason
        self._on_lost(reason)

    def refusal(self, address: str) -> grpc.Status:
        return rich_status(
            grpc.StatusCode.UNAVAILABLE,
            f"{self.what} at {address} no longer leads "
            f"({self.reason or 'its lease ran out'}); it is stepping down: ask the set for "
            "the leader",
            Reason.NOT_LEADER,
            {"leader": ""},
        )


class _FencedContext:
    """A servicer context whose writes are fenced; everything else is the context's own."""

    __slots__ = ("_context", "_interceptor")

    def __init__(self, context, interceptor: FenceInterceptor) -> None:
        self._context = context
        self._interceptor = interceptor

    async def write(self, message) -> None:
        await self._interceptor.check(self._context)
        await self._context.write(message)

    def __getattr__(self, name: str):
        return getattr(self._context, name)


class FenceInterceptor(grpc.aio.ServerInterceptor):
    """Checks `fence` on every call: on arrival and before anything the master sends."""

    def __init__(self, fence: Fence, address: Callable[[], str]) -> None:
        self.fence = fence
        self._address = address

    async def check(self, context) -> None:
        """Aborts the call (NOT_LEADER) unless the fence holds."""
        if not self.fence.holds():
            await context.abort_with_status(self.fence.refusal(self._address()))

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None:
            return handler
        check = self.check
        kind = next(
            k
            for k in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
            if getattr(handler, k) is not None
        )
        inner = getattr(handler, kind)
        if inspect.isasyncgenfunction(inner):  # a response stream that yields its messages

            async def generated(request, context):
                await check(context)
                async for reply in inner(request, context):
                    await check(context)
                    yield reply

            return handler._replace(**{kind: generated})

        async def answered(request, context):
            await check(context)
            # A stream written with context.write() is fenced at each write.
            reply = await inner(request, _FencedContext(context, self))
            await check(context)  # a unary answer leaves only from a leader
            return reply

        return handler._replace(**{kind: answered})
