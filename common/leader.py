"""Finding the leading master from any --master form, and following it when it changes.

Two users, one rule set:

- Long-lived clients (the agent's link, the SDK's driver) keep a `LeaderTracker`: `current()`
  is where to dial; after a failed dial or a broken stream, `on_error(e)` learns from it. A
  standby's refusal (NOT_LEADER) names the leader, which is dialled at once; a master that does
  not answer makes the tracker move to the next address of a list. With zk:// the tracker also
  watches the election, so it knows the new leader the moment ZooKeeper does (`changed`).
- One-shot commands call `find_leader` once: it asks the candidates which of them leads.

The decision (what an error means, which address comes next) is `next_step`, pure.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from agora.common.credentials import INSECURE, Credentials
from agora.common.errors import Reason, error_metadata, reason_of
from agora.common.masters import MasterSet

__all__ = [
    "FollowingStub",
    "LeaderNotFound",
    "LeaderTracker",
    "Step",
    "find_leader",
    "next_step",
    "superseded",
]

# An elected master answers NOT_LEADER naming itself for the few milliseconds it takes to start
# leading: dial it again after this long rather than after a whole backoff.
STARTING_RETRY = 0.05
# For this long after ZooKeeper names a new leader, a refused dial is retried after about
# STARTING_RETRY: the new leader takes a few tens of milliseconds to open its port.
FRESH_LEADER_WINDOW = 1.0


# Codes that mean the master did not answer (down, restarting, cut off).
_UNREACHABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


def superseded(address: str, epoch: int) -> str:
    """Why a client left a stream: ZooKeeper named a leader after the master it reached."""
    return (
        f"ZooKeeper names a leader elected after the master at {address} (epoch {epoch}): "
        "nothing more is taken from it"
    )


class LeaderNotFound(ConnectionError):
    """No master of the set answered as leader; the message says which were tried."""


@dataclass(frozen=True)
class Step:
    """What to do after an error: dial `address` after `delay` seconds (None: the caller's own
    backoff; the error said nothing about where the leader is)."""

    address: str
    delay: float | None


def next_step(masters: MasterSet, current: str, error: BaseException) -> Step:
    """Where to dial after `error` on a call to `current`. Pure."""
    if isinstance(error, grpc.RpcError) and reason_of(error) == Reason.NOT_LEADER:
        leader = error_metadata(error).get("leader", "")
        if leader and leader != current:
            return Step(leader, 0.0)  # a standby named the leader: go there now
        if leader == current:
            return Step(current, STARTING_RETRY)  # elected and starting to lead
        # No leader elected yet: try the others (a list), or wait (ZooKeeper will say).
    elif isinstance(error, grpc.RpcError) and error.code() not in _UNREACHABLE:
        return Step(current, None)  # it answered: a refusal, not a sign it is gone
    if masters.addresses and len(masters.addresses) > 1:
        known = list(masters.addresses)
        i = known.index(current) if current in known else -1
        return Step(known[(i + 1) % len(known)], None)
    return Step(current, None)


class LeaderTracker:
    """Where the leading master is, for a client that keeps a connection to it."""

    def __init__(self, masters: MasterSet | str) -> None:
        if isinstance(masters, str):
            from agora.common.masters import parse_masters

            masters = parse_masters(masters)
        # Loaded here: a client that only asks which master leads (`find_leader`, every
        # `agora` command) logs nothing and never loads structlog.
        import structlog

        self._log = structlog.get_logger(__name__)
        self.masters = masters
        self._current = masters.addresses[0] if masters.addresses else ""
        # Set whenever ZooKeeper reports a different leader: wake up and dial it.
        self.changed = asyncio.Event()
        self._zk = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first_read = asyncio.Event()
        self._zk_leader = ""  # the leader as ZooKeeper last named it
        self._zk_epoch = 0  # and its epoch (its election's sequence number)
        # Set (and replaced) whenever ZooKeeper names a leader of a higher epoch; made by the
        # first waiter, on its loop.
        self._named: asyncio.Event | None = None
        self._watcher: asyncio.Task | None = None
        self._learned_at = -math.inf  # when ZooKeeper last named a new one (monotonic)

    def __str__(self) -> str:
        return str(self.masters)

    def current(self) -> str:
        """The address to dial now ("" while ZooKeeper names no leader)."""
        return self._current

    def on_superseded(self, epoch: int, cut: Callable[[], object]) -> asyncio.Task | None:
        """Calls `cut()` once ZooKeeper names a leader elected after the one of `epoch`; cancel
        the returned task when the stream ends first. None for epoch 0 (no ZooKeeper)."""
        if not epoch:
            return None
        waiter = asyncio.ensure_future(self.until_superseded(epoch))

        def done(future: asyncio.Task) -> None:
            if not future.cancelled() and future.exception() is None:
                cut()

        waiter.add_done_callback(done)
        return waiter

    def superseded(self, epoch: int) -> bool:
        """Whether ZooKeeper names a leader elected after the one of `epoch`: what arrives on a
        stream to that master is a deposed leader's word, to be dropped. False without
        ZooKeeper, and for epoch 0 (a master alone)."""
        return bool(epoch) and self._zk_epoch > epoch

    async def until_superseded(self, epoch: int) -> None:
        """Returns once ZooKeeper names a leader elected after the one of `epoch` (never
        without ZooKeeper): a client cuts its stream to the deposed leader then."""
        while not self.superseded(epoch):
            if self._named is None:
                self._named = asyncio.Event()
            await self._named.wait()

    def on_error(self, error: BaseException) -> float | None:
        """Learns from a failed dial or a broken stream; returns how long to wait before the
        next dial, or None to use the caller's backoff."""
        if not self._current:
            return None
        step = next_step(self.masters, self._current, error)
        if self._zk_leader and step.delay is None and self._zk_leader != self._current:
            # Dialling what a (possibly stale) redirect named failed: ZooKeeper knows better.
            step = Step(self._zk_leader, 0.0)
        elif step.delay is None and time.monotonic() - self._learned_at < FRESH_LEADER_WINDOW:
            # ZooKeeper named this leader a moment ago and it is still opening its port: try
            # again shortly rather than after a whole backoff (jittered, bounded in time).
            step = Step(step.address, STARTING_RETRY * (0.5 + random.random()))
        if step.address != self._current:
            self._log.info("following the master set", previous=self._current, now=step.address)
        self._current = step.address
        return step.delay

    async def start(self) -> None:
        """With zk://, connects to ZooKeeper in the background and watches the election."""
        if not self.masters.uses_zookeeper or self._zk is not None:
            return
        from agora.common.election import ELECTION, zk_client

        self._loop = asyncio.get_running_loop()
        self._zk = zk = zk_client(self.masters.zk_hosts, 10.0)
        zk.start_async()  # connects (and reconnects) on its own thread
        self._first_read = asyncio.Event()
        self._watcher = asyncio.create_task(self._watch(ELECTION), name="leader-watch")
        # The first dial should go to the leader, not wait for a backoff: give ZooKeeper and
        # the watch's first read a moment (the caller backs off and retries after that).
        try:
            async with asyncio.timeout(5.0):
                await self._first_read.wait()
        except TimeoutError:
            self._log.warning("ZooKeeper has not named a leader yet; still watching", zk=str(self))

    async def _watch(self, election: str) -> None:
        """Sets the election watch once ZooKeeper answers, trying for as long as it takes."""
        zk, path = self._zk, f"{self.masters.zk_path}/{election}"
        delay = 0.5
        while self._zk is zk:
            try:
                # A watch on a path that does not exist yet would never fire: the masters may
                # start after their agents.
                await asyncio.to_thread(_watch_children, zk, path, self._on_members)
                return
            except Exception as e:  # noqa: BLE001 - unreachable: kazoo keeps reconnecting
                self._log.warning(
                    "cannot reach ZooKeeper yet; retrying", zk=str(self), error=repr(e)
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def pause(self, seconds: float) -> None:
        """Sleeps `seconds`, or less if ZooKeeper names a new leader meanwhile (since the last
        `changed.clear()`, which a dial makes)."""
        try:
            async with asyncio.timeout(seconds):
                await self.changed.wait()
        except TimeoutError:
            pass

    async def close(self) -> None:
        if self._zk is not None:
            zk, self._zk = self._zk, None
            if self._watcher is not None:
                self._watcher.cancel()
            await asyncio.to_thread(_close, zk)

    def _on_members(self, children: list[str]) -> None:  # kazoo's thread
        from agora.common.election import find_leader

        if self._zk is None:
            return
        try:
            leader = find_leader(self._zk, self.masters.zk_path)
        except Exception:  # noqa: BLE001 - the connection dropped; keep the last known leader
            return
        address = leader.address if leader is not None else ""
        epoch = leader.epoch if leader is not None else 0
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._set_leader, address, epoch)

    def _set_leader(self, address: str, epoch: int = 0) -> None:
        self._first_read.set()
        self._zk_leader = address
        # As ZooKeeper says, even lower: the line's first sequence never goes down, unless the
        # election's data was lost or recreated, and then the new numbers are the truth (a
        # high-water mark would make every later leader look deposed).
        if epoch and epoch != self._zk_epoch:
            self._zk_epoch = epoch
            named, self._named = self._named, None
            if named is not None:
                named.set()
        if address and address != self._current:
            self._learned_at = time.monotonic()
            self._log.info("the master set has a new leader", leader=address)
            self._current = address
            self.changed.set()


def _watch_children(zk, path: str, func) -> None:
    """Blocking: waits for a connection, creates `path` if missing, watches its children."""
    from kazoo.recipe.watchers import ChildrenWatch

    deadline = time.monotonic() + 2.0
    while not zk.connected:
        if time.monotonic() > deadline:
            raise ConnectionError("not connected to ZooKeeper")
        time.sleep(0.01)
    zk.ensure_path(path)
    ChildrenWatch(zk, path, func, send_event=False)


def _close(zk) -> None:
    zk.stop()
    zk.close()


# --- one-shot commands -------------------------------------------------------------------------


def _candidates(masters: MasterSet) -> list[str]:
    if not masters.uses_zookeeper:
        return list(masters.addresses)
    from agora.common.election import list_masters, zk_client

    zk = zk_client(masters.zk_hosts, 10.0)
    try:
        zk.start(5.0)
    except Exception as e:  # noqa: BLE001 - kazoo's timeout, or a refused connection
        raise LeaderNotFound(f"cannot reach ZooKeeper at {masters.zk_hosts}: {e}") from None
    try:
        return [m.address for m in list_masters(zk, masters.zk_path)]
    finally:
        _close(zk)


def find_leader(
    masters: MasterSet | str,
    credentials: Credentials = INSECURE,
    *,
    timeout: float = 10.0,
) -> str:
    """The address of the leading master (blocking). A single address is returned as it is
    unless it turns out to be a standby, whose refusal names the leader. Raises
    LeaderNotFound when none leads within `timeout` (an election in progress is waited for)."""
    from agora.common.credentials import sync_channel
    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.v1 import operator_pb2, operator_pb2_grpc

    if isinstance(masters, str):
        from agora.common.masters import parse_masters

        masters = parse_masters(masters)
    deadline = time.monotonic() + timeout
    tried: dict[str, str] = {}
    while True:
        queue = _candidates(masters)
        seen: set[str] = set()
        while queue:
            address = queue.pop(0)
            if address in seen:
                continue
            seen.add(address)
            try:
                with sync_channel(address, credentials, CHANNEL_OPTIONS) as channel:
                    operator_pb2_grpc.OperatorStub(channel).ListMasters(
                        operator_pb2.ListMastersRequest(),
                        timeout=max(0.5, min(3.0, deadline - time.monotonic())),
                    )
                return address
            except grpc.RpcError as e:
                if reason_of(e) == Reason.NOT_LEADER:
                    leader = error_metadata(e).get("leader", "")
                    tried[address] = "standing by"
                    if leader:
                        queue.insert(0, leader)
                    continue
                if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    tried[address] = _why_not(e, address, credentials)
                    continue
                return address  # it answered as a leader would (e.g. PERMISSION_DENIED)
        standing_by = any(why == "standing by" for why in tried.values())
        if not standing_by and not masters.uses_zookeeper:
            if masters.single is not None:
                return masters.single  # down: the command's own call says so, as before
            said = "; ".join(f"{a}: {why}" for a, why in tried.items())
            raise LeaderNotFound(f"no master of {masters} answers ({said})")
        if time.monotonic() >= deadline:
            said = "; ".join(f"{a}: {why}" for a, why in tried.items()) or "no master is listed"
            raise LeaderNotFound(f"no master of {masters} is leading ({said})")
        time.sleep(0.2)


def _why_not(error: grpc.RpcError, address: str, credentials: Credentials) -> str:
    """A master of a set that did not answer, in a few words (common/failures names why)."""
    from agora.common.failures import Cause, classify_error

    failure = classify_error(error, address, credentials)
    if failure.cause in (Cause.REFUSED, Cause.UNREACHABLE, Cause.DNS):
        return failure.cause.value
    return failure.message


class FollowingStub:
    """A gRPC stub for unary calls to whichever master leads: each call dials the tracker's
    current address, and a standby's redirect is followed at once (up to `hops` times).

    Used by the framework daemons for their Operator calls, e.g.
    `FollowingStub(operator_pb2_grpc.OperatorStub, tracker, credentials).ListAgents(req)`."""

    def __init__(self, stub_class, tracker: LeaderTracker, credentials: Credentials, hops: int = 3):
        self._stub_class = stub_class
        self._tracker = tracker
        self._credentials = credentials
        self._hops = hops
        self._address = ""
        self._channel: grpc.aio.Channel | None = None
        self._stub = None

    def _current_stub(self):
        from agora.common.rpc import open_channel

        address = self._tracker.current()
        if address != self._address or self._stub is None:
            if self._channel is not None:
                asyncio.ensure_future(self._channel.close())
            self._address = address
            self._channel = open_channel(address, self._credentials, redial=True)
            self._stub = self._stub_class(self._channel)
        return self._stub

    def __getattr__(self, method: str):
        async def call(request, **kwargs):
            for hop in range(self._hops + 1):
                rpc = getattr(self._current_stub(), method)
                try:
                    return await rpc(request, **kwargs)
                except grpc.aio.AioRpcError as e:
                    delay = self._tracker.on_error(e)
                    if delay is None or hop == self._hops:
                        raise
                    await asyncio.sleep(delay)
            raise AssertionError("unreachable")

        return call

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()
