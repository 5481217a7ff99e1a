"""The agent's end of AgentLink.Connect: dial the master, register, heartbeat, reconnect.

One stream at a time. Each begins with Register (the current id and running tasks, built
fresh for every attempt); a stream that breaks (the channel's gRPC keepalive breaks it when the
master stops answering pings: common/rpc.py), or a master that does not answer the Register
within register_timeout, is dropped and dialled again with jittered exponential backoff (0.2 s
doubling to 10 s: common/backoff.py). Each failure is named by common/failures.py (refused,
no answer, TLS, the wrong service, DNS, refused by the ACLs) and said once at warning, then
quietly until its cause changes, with a reminder every minute. A registered master sends
nothing while there is nothing to say: the keepalive, answered in gRPC's core, is the evidence
it is there, so a master that is busy but alive keeps its agents. With a set of masters the
LeaderTracker says where to dial: a standby's refusal names the leader, which is dialled at
once, and with zk:// a change of leader wakes the link at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc
import structlog

from agora.agent.aio_util import cancel_and_wait
from agora.agent.link_policy import WaitReason, retry_delay
from agora.common.backoff import Backoff
from agora.common.batches import agent_batches
from agora.common.credentials import INSECURE, Credentials
from agora.common.failures import Cause, RepeatFilter, classify_error
from agora.common.leader import LeaderTracker, superseded
from agora.common.rpc import describe_rpc_error, drain_queue, open_channel
from agora.v1 import agent_link_pb2, agent_link_pb2_grpc

log = structlog.get_logger(__name__)

AgentMessage = agent_link_pb2.AgentMessage
MasterMessage = agent_link_pb2.MasterMessage


class LinkHandler(Protocol):
    def build_register(self) -> AgentMessage.Register: ...
    def on_registered(self, msg: MasterMessage.Registered) -> None: ...
    def on_run_task(self, msg: MasterMessage.RunTask) -> None: ...
    def on_kill_task(self, msg: MasterMessage.KillTask) -> None: ...
    def on_status_update_ack(self, msg: MasterMessage.StatusUpdateAck) -> None: ...
    def on_shutdown_framework(self, msg: MasterMessage.ShutdownFramework) -> None: ...
    def on_shutdown(self, msg: MasterMessage.Shutdown) -> Awaitable[None]: ...


# Seconds: a stream left for a newer leader this soon after the last is backed off.
SUPERSEDED_AGAIN = 5.0


class _Reconnect(Exception):
    """End this stream and dial again at once (the master told us to start afresh)."""


class _Superseded(Exception):
    """ZooKeeper names a leader elected after the one this stream reaches: nothing more is
    taken from it (a deposed leader's RunTask must not run), and the new leader is dialled."""

    def __init__(self, address: str, epoch: int) -> None:
        super().__init__(superseded(address, epoch))
        self.address, self.epoch = address, epoch


class MasterLink:
    def __init__(
        self,
        master: str | LeaderTracker,
        handler: LinkHandler,
        *,
        backoff_initial: float = 0.2,
        backoff_max: float = 10.0,
        default_heartbeat: float = 5.0,
        register_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        credentials: Credentials = INSECURE,
    ) -> None:
        self.tracker = master if isinstance(master, LeaderTracker) else LeaderTracker(master)
        self._credentials = credentials
        self._handler = handler
        self._backoff_initial = backoff_initial
        # Jittered, so that the agents cut off by one master restart do not all come back in
        # the same instant.
        self._backoff = Backoff(initial=backoff_initial, cap=backoff_max)
        self._default_heartbeat = default_heartbeat
        self._register_timeout = register_timeout
        self._clock = clock
        self._outbox: asyncio.Queue[AgentMessage | None] | None = None
        self._registered = False
        self._stopping = False
        self._call = None
        self.registrations = 0  # how many times the master accepted a Register
        self._failures = 0  # failed attempts since the last registration
        self._said = RepeatFilter(clock=clock)  # how loudly to log the next failure
        self._superseded_at = -math.inf  # when a stream was last left for a newer leader
        # Each takes the message in the oneof field of its name (read with getattr below).
        self._handlers: dict[str, Callable[[Any], None]] = {
            "run_task": handler.on_run_task,
            "kill_task": handler.on_kill_task,
            "status_update_ack": handler.on_status_update_ack,
            "shutdown_framework": handler.on_shutdown_framework,
        }

    @property
    def master(self) -> str:
        """The master dialled now (the leader, as far as the link knows)."""
        return self.tracker.current() or str(self.tracker)

    @property
    def registered(self) -> bool:
        return self._registered

    def send(self, message: AgentMessage) -> bool:
        """Queues a message on the current stream; False when not registered."""
        if not self._registered or self._outbox is None:
            return False
        self._outbox.put_nowait(message)
        return True

    async def run(self) -> None:
        """Keeps a registered stream to the master until `stop`."""
        self._backoff.reset()
        try:
            await self.tracker.start()
            await self._run()
        finally:
            await self.tracker.close()

    async def _run(self) -> None:
        while not self._stopping:
            attempt_log = log.bind(master=self.master)
            try:
                await self._session()
                if self._stopping:
                    return
                self._backoff.reset()
                self._failures = 0
                attempt_log.info("master closed the agent link; reconnecting")
            except _Superseded as e:
                log.info(str(e), master=e.address, epoch=e.epoch)
                now = self._clock()
                if now - self._superseded_at < SUPERSEDED_AGAIN:
                    # Again at once: ZooKeeper and the masters disagree for now (its data
                    # restored, a watch behind); back off rather than re-register in a loop.
                    await asyncio.sleep(self._backoff.next_delay())
                else:
                    self._backoff.reset()
                self._superseded_at = now
                continue
            except _Reconnect:
                self._backoff.reset()
                continue
            except asyncio.CancelledError:
                if self._stopping or _being_cancelled():
                    raise
                # The call was cancelled under us (grpc reports it so): treat as a failure.
                await asyncio.sleep(self._backoff.next_delay())
                continue
            except Exception as e:  # noqa: BLE001 - every failure means: dial again later
                if self._stopping:
                    return
                self._failures += 1
                if self.registrations and self._backoff.attempts == 0:
                    attempt_log.warning("lost the master", error=describe_rpc_error(e))
                failed_at = self.master
                delay, why = retry_delay(e, self._backoff, self.tracker.on_error(e))
                self._say_failure(e, failed_at, why, delay)
                await self.tracker.pause(delay)
                continue
            await asyncio.sleep(self._backoff_initial)

    def _say_failure(self, error: BaseException, address: str, why: WaitReason, delay: float):
        """Logs a failed attempt: its cause once at warning (a refusal with this agent's
        principal and the ACL action), the same again only at debug, a reminder every minute."""
        if why is WaitReason.MASTER_BUSY:
            log.debug("the master is busy; registering again later", retry_in=round(delay, 2))
            return
        failure = classify_error(
            error, address, self._credentials, what="the master", service="AgentLink"
        )
        level = self._said.level(failure) if why is WaitReason.BACKOFF else "debug"
        fields: dict[str, object] = {
            "cause": failure.cause.value,
            "retry_in": round(delay, 2),
            "master": address,
        }
        if failure.cause is Cause.DENIED:
            fields.update(
                principal=self._credentials.principal or "(anonymous)",
                acl_action="register_agents",
            )
            then = "registering again with backoff"
        else:
            then = "retrying with backoff"
        if self._said.repeats:
            fields["failures"] = self._failures
        getattr(log, level)(f"{failure.message}; {then}", **fields)

    async def stop(self, task: asyncio.Task) -> None:
        """Ends the stream and the `run` task. Cancelling the call first matters: a task
        cancelled while grpc completes a read can miss its cancellation (Python 3.11)."""
        self._stopping = True
        if self._call is not None:
            self._call.cancel()
        await cancel_and_wait(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("agent link ended with an error", error=repr(task.exception()))

    async def _session(self) -> None:
        self.tracker.changed.clear()
        address = self.tracker.current()
        if not address:
            raise ConnectionError(f"no master of {self.tracker} is leading yet")
        channel = open_channel(address, self._credentials, redial=True)
        outbox: asyncio.Queue[AgentMessage | None] = asyncio.Queue()
        heartbeat: asyncio.Task | None = None
        watchdog: asyncio.Task | None = None
        deposed: asyncio.Task | None = None  # cuts the stream once ZooKeeper names a successor
        epoch = 0  # the epoch of the leader this stream reaches (Registered says)
        call = None
        try:
            register = self._handler.build_register()
            # Loud on the first attempt; the retries already say "retrying".
            (log.debug if self._failures else log.info)(
                "registering with the master",
                master=self.master,
                agent_id=register.info.agent_id or "(new)",
                tasks=len(register.tasks),
            )
            register.accepts_batches = True
            outbox.put_nowait(AgentMessage(register=register))
            self._outbox = outbox
            # Enabled once the master says it reads batches (Registered).
            batcher = agent_batches()
            call = self._call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect(
                drain_queue(outbox, batcher)
            )
            interval = self._default_heartbeat
            silence = _Silence(self._clock, self._register_timeout)
            watchdog = asyncio.create_task(silence.watch(call))
            while True:
                message = await call.read()
                if silence.expired:
                    raise ConnectionError(
                        f"the master did not answer the registration in {silence.limit:.1f} s"
                    )
                if message is grpc.aio.EOF:
                    return
                silence.heard()
                if self.tracker.superseded(epoch):
                    raise _Superseded(address, epoch)  # a deposed leader's word: drop it
                batch = message.batch.messages if message.HasField("batch") else (message,)
                for one in batch:
                    kind = one.WhichOneof("message")
                    if kind == "registered":
                        epoch = one.registered.epoch
                        if self.tracker.superseded(epoch):
                            raise _Superseded(address, epoch)
                        deposed = self.tracker.on_superseded(epoch, call.cancel)
                        self._failures = 0
                        self._backoff.reset()
                        self._said.reset()
                        interval = one.registered.heartbeat_interval_seconds or interval
                        batcher.enabled = one.registered.accepts_batches
                        # Registered: from now on the keepalive watches the master.
                        watchdog.cancel()
                        self._handler.on_registered(one.registered)
                        self._registered = True
                        self.registrations += 1
                        if heartbeat is None:
                            heartbeat = asyncio.create_task(self._heartbeat(outbox, interval))
                    elif kind == "shutdown":
                        # Also the answer to a Register with an id the master has removed.
                        self._registered = False
                        await self._handler.on_shutdown(one.shutdown)
                        raise _Reconnect()
                    else:
                        self._dispatch(kind, one)
        except asyncio.CancelledError:
            if _being_cancelled():
                raise
            if watchdog is not None and silence.expired:
                raise ConnectionError(
                    f"the master did not answer the registration in {silence.limit:.1f} s"
                ) from None
            if self.tracker.superseded(epoch):
                raise _Superseded(address, epoch) from None
            raise
        finally:
            self._registered = False
            self._outbox = None
            self._call = None
            outbox.put_nowait(None)
            for task in (heartbeat, watchdog, deposed):
                if task is not None:
                    task.cancel()
            if call is not None:
                call.cancel()
            await channel.close()

    def _dispatch(self, kind: str | None, message: MasterMessage) -> None:
        if not self._registered:
            log.warning("ignoring a master message before registration", kind=kind)
        elif kind in self._handlers:
            try:
                self._handlers[kind](getattr(message, kind))
            except Exception:  # noqa: BLE001 - one bad message must not cut the link
                log.exception("failed to handle a master message", kind=kind)
        elif kind == "batch":
            log.warning("ignoring a Batch inside a Batch from the master")
        # heartbeat (from masters of earlier versions): nothing to do.

    async def _heartbeat(self, outbox: asyncio.Queue, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            outbox.put_nowait(AgentMessage(heartbeat=AgentMessage.Heartbeat(timestamp=time.time())))


class _Silence:
    """Cancels the call once the master has been silent for `limit` seconds."""

    def __init__(self, clock: Callable[[], float], limit: float) -> None:
        self._clock = clock
        self.limit = limit
        self.last = clock()
        self.expired = False

    def heard(self) -> None:
        self.last = self._clock()

    async def watch(self, call) -> None:
        while True:
            left = self.last + self.limit - self._clock()
            if left <= 0:
                self.expired = True
                call.cancel()
                return
            await asyncio.sleep(min(left, 0.5))


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
