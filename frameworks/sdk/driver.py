"""The driver: owns the connection to the master and turns its events into Framework callbacks.

One subscription at a time is a *session*: a reader task pulls events off the stream into a
queue (so heartbeats are seen even while a callback is busy) and a dispatcher task hands them
to the framework in order. When the stream breaks, ends, or the master falls silent for three
heartbeat intervals, the driver reconnects with jittered exponential backoff and subscribes
again with the same framework_id, then reconciles implicitly so the framework learns what
happened to its tasks while it was away.
"""

from __future__ import annotations

import asyncio
import getpass
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import grpc
import structlog
from google.protobuf.message import Message

from agora.common import Resources
from agora.common.backoff import Backoff
from agora.common.credentials import INSECURE, Credentials
from agora.common.errors import Reason
from agora.common.failures import Cause, Failure, RepeatFilter, classify, classify_error
from agora.frameworks.sdk.acks import AckBatcher, acknowledge_request
from agora.frameworks.sdk.errors import OfferConflict, SchedulerError
from agora.frameworks.sdk.framework import Framework
from agora.frameworks.sdk.pending import PendingAnswers, next_ask_delay
from agora.frameworks.sdk.transport import EventStream, GrpcSchedulerTransport, SchedulerTransport
from agora.frameworks.sdk.wants import WantsMirror, wants_proto
from agora.v1 import common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

# Refusals of an optimistic Accept (driver.launch raises OfferConflict for them).
_CONFLICTS = frozenset({Reason.OFFER_CONFLICT, Reason.BELOW_SHARE_PRIORITY})

OfferLike = common_pb2.Offer | str
TaskRef = str | tuple[str, str] | common_pb2.TaskStatus | common_pb2.TaskInfo


class SubscriptionEnded(Exception):
    """The master ended the framework's subscription for good (an ERROR event, or it refused
    the subscription); `run` raises it after `Framework.on_error`. `code` is the refusal's
    gRPC status (PERMISSION_DENIED: the ACLs), None for an ERROR event."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    @property
    def refused(self) -> bool:
        """The master turned the subscription away (ACLs, credentials): nothing was removed,
        and the same subscription may be accepted later (the ACL file re-read)."""
        return self.code in _REFUSALS


_REFUSALS = frozenset({grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED})


# The master's reasons (ErrorInfo) for "your framework or stream is not mine": subscribe again.
STALE_REASONS = frozenset({Reason.FRAMEWORK_UNKNOWN, Reason.FRAMEWORK_REMOVED, Reason.STREAM_STALE})


def is_stale_stream_error(error: SchedulerError) -> bool:
    """True when a call failed because the master no longer honours our framework or stream
    (e.g. after it restarted), as the reason in the master's error says. An unknown offer, task
    or agent has a reason of its own and needs no re-sync."""
    return error.reason in STALE_REASONS


@dataclass
class _StreamEnded:
    reason: str
    error: SchedulerError | None = None


class _Ids(TypedDict):
    """The fields that name the subscription in every Scheduler call."""

    framework_id: str
    stream_id: str


@dataclass
class _Session:
    stream: EventStream
    resubscribing: bool
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    reader: asyncio.Task | None = None
    subscribed: bool = False
    ended: bool = False


class Driver:
    """Connects a Framework to the master. Build it with `run`/`run_async`, or directly with a
    transport (tests use `agora.frameworks.sdk.testing.MemoryTransport`).

    All calls are coroutines that raise `SchedulerError` when the master refuses them (the gRPC
    code and the master's message say why), except `stop()`, which is a plain method.
    """

    def __init__(
        self,
        framework: Framework,
        transport: SchedulerTransport,
        info: common_pb2.FrameworkInfo,
        *,
        backoff: Backoff | None = None,
        failures: RepeatFilter | None = None,
        subscribe_timeout: float = 10.0,
        silence_heartbeats: float = 3.0,
        min_silence: float = 1.0,
    ) -> None:
        self.framework = framework
        self.transport = transport
        self.info = common_pb2.FrameworkInfo()
        self.info.CopyFrom(info)
        self.framework_id = info.framework_id
        self.stream_id = ""
        self.master_id = ""
        self.master_principal = ""  # the master's certificate's name, from SUBSCRIBED
        self._demand_told: tuple[Resources, int] | None = None  # the last demand the master took
        self._wants = WantsMirror()  # what the master counts as this framework's wants
        self.heartbeat_interval = 0.0
        # 0.2 s doubling to 10 s (common/backoff.py), drawn from the upper half of each band so
        # that the frameworks cut off by one master restart do not all arrive at once; a
        # master down for good, or one that turns us away, is not dialled twice a second.
        self.backoff = backoff or Backoff()
        # How loudly to say the latest failure: once at warning per cause (common/failures);
        # shared by the drivers a daemon makes one after another (frameworks/sdk/daemon.py).
        self._said = failures or RepeatFilter()
        # How long to wait for SUBSCRIBED, and how many heartbeat intervals of silence mean the
        # master (or the path to it) is gone even though TCP has not noticed; never less than
        # min_silence, so that a master busy for a moment (disk, GC) is not taken for dead.
        self.subscribe_timeout = subscribe_timeout
        self.silence_heartbeats = silence_heartbeats
        self.min_silence = min_silence
        self._stop = asyncio.Event()
        self._stop_from_dispatcher = False
        self._session: _Session | None = None
        self._dispatcher: asyncio.Task | None = None
        self._ended: str | None = None
        self._ended_code: grpc.StatusCode | None = None
        self._tearing_down = False
        self._pending_ack: common_pb2.TaskStatus | None = None
        # Implicit acks, coalesced: one Acknowledge call per burst of updates, not per update.
        self._acks = AckBatcher(self._send_acks)
        # Tasks whose fate is still to be learnt (frameworks/sdk/pending.py), and the task
        # that asks the master about them with backoff until each is answered.
        self.pending = PendingAnswers()
        self._pending_grew = asyncio.Event()
        self._asker: asyncio.Task | None = None
        self._running = False
        self._log = log.bind(framework=info.name)

    # --- state -------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Subscribed on a live stream: calls can be made."""
        s = self._session
        return s is not None and s.subscribed and not s.ended

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- the loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Subscribes and delivers events until `stop()`; reconnects whenever the stream is lost.

        Raises SubscriptionEnded if the master ends the subscription for good.
        """
        if self._running:
            raise RuntimeError("this driver is already running")
        self._running = True
        first = True
        self._asker = asyncio.create_task(self._ask_until_answered(), name="reconcile-pending")
        try:
            await self.transport.start()
            while not self._stop.is_set():
                if not first:
                    # A standby that named the leader: go now; else back off (with jitter).
                    delay = self.transport.retry_delay()
                    if delay is None:
                        delay = self.backoff.next_delay()
                    self._log.debug("reconnecting to the master", in_seconds=round(delay, 3))
                    if await self._stopped_within(delay, self.transport.leader_changed):
                        break
                    await self.transport.reset()
                first = False
                if await self._run_session():
                    self.backoff.reset()
                    self._said.reset()
        finally:
            self._running = False
            self._asker.cancel()
            await asyncio.gather(self._asker, return_exceptions=True)
            await self.transport.close()
        if self._ended is not None:
            raise SubscriptionEnded(self._ended, self._ended_code)

    def stop(self) -> None:
        """Ends `run`. Called from a callback, the current event finishes first (an update is
        still acknowledged). The master keeps the framework and its tasks for its
        failover_timeout; call `teardown()` instead to remove them."""
        if not self._stop.is_set():
            current = asyncio.current_task()
            self._stop_from_dispatcher = current is not None and current is self._dispatcher
            self._stop.set()

    async def _stopped_within(self, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Waits `seconds` (less if `wake` is set: a new leader is known); True if stopped."""
        waits = [asyncio.ensure_future(self._stop.wait())]
        if wake is not None:
            waits.append(asyncio.ensure_future(wake.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return self._stop.is_set()

    async def _run_session(self) -> bool:
        """One subscription, from Subscribe to the end of its stream; True if it subscribed."""
        info = common_pb2.FrameworkInfo()
        info.CopyFrom(self.info)
        info.framework_id = self.framework_id
        # With a framework_id this is a re-subscription (or a failover from an earlier run).
        # Said once per (re)connection, not on every retry of a master that is not there.
        (self._log.debug if self.backoff.attempts > 1 else self._log.info)(
            "subscribing", framework_id=self.framework_id or "(new)"
        )
        stream = self.transport.subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        session = _Session(stream=stream, resubscribing=bool(self.framework_id))
        self._session = session
        session.reader = asyncio.create_task(self._read(session))
        dispatcher = self._dispatcher = asyncio.create_task(self._dispatch(session))
        stopper = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({dispatcher, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if self._stop.is_set():
                if self._stop_from_dispatcher and not dispatcher.done():
                    await dispatcher  # the event being handled finishes (and is acknowledged)
                else:
                    dispatcher.cancel()
                # Let the last acknowledgements reach the master, or the agents resend them.
                await self._flush_acks()
        finally:
            # On a broken stream they cannot succeed; the agents resend those updates.
            dropped = self._acks.discard()
            if dropped:
                self._log.debug("acknowledgements dropped with the stream", count=dropped)
            session.ended = True
            if not dispatcher.done():
                dispatcher.cancel()
            stopper.cancel()
            session.reader.cancel()
            stream.cancel()
            results = await asyncio.gather(
                session.reader, dispatcher, stopper, return_exceptions=True
            )
            for result in results:
                if isinstance(result, Exception):
                    self._log.error("driver task failed", error=repr(result))
            self._session = None
            self._dispatcher = None
            self.stream_id = ""
        return session.subscribed

    async def _read(self, session: _Session) -> None:
        silence = _SilenceTimer(self.subscribe_timeout)
        events = aiter(session.stream)
        try:
            async with asyncio.timeout(None) as guard:
                silence.start(guard)
                while True:
                    try:
                        event = await anext(events)
                    except StopAsyncIteration:
                        self._end_stream(session, "the master closed the stream")
                        return
                    silence.heard()
                    kind = event.WhichOneof("event")
                    if kind == "subscribed":
                        interval = event.subscribed.heartbeat_interval_seconds
                        silence.set_limit(
                            max(self.min_silence, interval * self.silence_heartbeats)
                            if interval > 0
                            else None
                        )
                    if kind == "heartbeat":
                        continue  # its only job was to reset the silence timer above
                    session.queue.put_nowait(event)
        except TimeoutError:
            what = "SUBSCRIBED" if not session.subscribed else "any event"
            self._end_stream(session, f"no {what} from the master in {silence.expired_after:g}s")
        except SchedulerError as e:
            self._end_stream(session, f"stream broke: {e}", e)
        finally:
            silence.stop()

    def _end_stream(self, session: _Session, reason: str, error: SchedulerError | None = None):
        if not session.ended:
            session.ended = True
            session.queue.put_nowait(_StreamEnded(reason, error))

    def _resync(self, session: _Session, reason: str) -> None:
        """Drops a stream the master no longer honours, so the loop subscribes again."""
        if session.ended:
            return
        self._log.warning("stream is stale; subscribing again", reason=reason)
        if session.reader is not None:
            session.reader.cancel()
        self._end_stream(session, f"re-syncing: {reason}")

    async def _dispatch(self, session: _Session) -> None:
        while True:
            item = await session.queue.get()
            if isinstance(item, _StreamEnded):
                await self._stream_ended(session, item)
                return
            await self._handle(session, item)
            if self._stop.is_set():
                return

    async def _stream_ended(self, session: _Session, ended: _StreamEnded) -> None:
        if self._stop.is_set():
            return
        if ended.error is not None and not ended.error.transient:
            # Refused for good (e.g. the framework was removed): retrying cannot help.
            await self._end(ended.error.message or str(ended.error), ended.error.code)
            return
        if session.subscribed:
            self._log.warning("disconnected from the master", reason=ended.reason)
            await self._callback("on_disconnected")
            return
        address = str(getattr(self.transport, "address", "") or "the master")
        if ended.error is not None:
            credentials = getattr(self.transport, "credentials", None) or INSECURE
            failure = classify_error(ended.error, address, credentials, service="Scheduler")
        else:
            failure = Failure(Cause.OTHER, f"{address}: {ended.reason}")
        level = self._said.level(failure)
        getattr(self._log, level)(
            f"could not subscribe: {failure}; retrying with backoff",
            cause=failure.cause.value,
            **({"failures": self._said.repeats} if self._said.repeats else {}),
        )

    async def _handle(self, session: _Session, event: scheduler_pb2.Event) -> None:
        kind = event.WhichOneof("event")
        if kind == "subscribed":
            await self._subscribed(session, event.subscribed)
        elif kind == "offers":
            if not session.ended:  # offers die with their stream
                await self._callback("on_offers", list(event.offers.offers))
        elif kind == "rescind":
            if not session.ended:
                await self._callback("on_rescind", event.rescind.offer_id)
        elif kind == "update":
            await self._update(event.update.status)
        elif kind == "failure":
            await self._callback("on_agent_lost", event.failure.agent_id)
        elif kind == "preemption":
            notice = event.preemption
            await self._callback(
                "on_preemption", notice.task_id, notice.agent_id, notice.message, notice.deadline
            )
        elif kind == "agent_drain":
            drain = event.agent_drain
            await self._callback("on_agent_drain", drain.agent_id, drain.draining, drain.deadline)
        elif kind == "hold":
            hold = event.hold
            state = scheduler_pb2.HoldState.Name(hold.state).removeprefix("HOLD_")
            if hold.offers and not session.ended:
                await self._callback("on_held_offers", hold.hold_id, list(hold.offers))
            await self._callback("on_hold", hold.hold_id, state, hold.message)
        elif kind == "error":
            if self._tearing_down:
                self._log.debug("master confirmed teardown", message=event.error.message)
            else:
                await self._end(event.error.message)
        elif kind == "batch":  # the transport unwraps batches; one inside one is not allowed
            self._log.warning("ignoring an event batch inside a batch")
        else:
            self._log.debug("ignoring unknown event", kind=kind)

    async def _subscribed(self, session: _Session, sub: scheduler_pb2.Event.Subscribed) -> None:
        self.framework_id = sub.framework_id
        self.stream_id = sub.stream_id
        self.master_id = sub.master_id
        self.master_principal = sub.master_principal
        self._demand_told = None  # the master starts each subscription with no demand
        self._wants.told(None)  # nor wants
        self.heartbeat_interval = sub.heartbeat_interval_seconds
        session.subscribed = True
        self._log = log.bind(framework=self.info.name, framework_id=sub.framework_id)
        self._log.info(
            "subscribed",
            stream_id=sub.stream_id,
            master_id=sub.master_id,
            resubscribed=session.resubscribing,
        )
        if session.resubscribing:
            # Launches in flight may have died with the master that took them: ask about
            # them until they are answered (the agents may not be back yet).
            self.pending.resubscribed()
            self._pending_grew.set()
            # While we were away tasks may have ended and their updates been dropped: ask the
            # master for the state of every task it knows of ours.
            try:
                await self.reconcile()
            except SchedulerError as e:
                self._log.warning("implicit reconciliation failed", error=str(e))
        await self._callback("on_subscribed", sub.framework_id)

    async def _update(self, status: common_pb2.TaskStatus) -> None:
        self.pending.heard(status.task_id)
        implicit = bool(status.uuid) and self.framework.implicit_acknowledgements
        self._pending_ack = status if implicit else None
        ok = await self._callback("on_update", status)
        pending, self._pending_ack = self._pending_ack, None
        if ok and pending is not None:
            # In the background: the next event need not wait for this round trip, and the
            # agent (which resends after 0.5 s) hears back sooner when updates come in bursts.
            self._acks.add(pending)

    async def _flush_acks(self) -> None:
        await self._acks.drain()

    async def _send_acks(self, statuses: Sequence[common_pb2.TaskStatus]) -> None:
        """Sends one batch of implicit acks. A failure is harmless: the agent resends an
        unacknowledged update and we acknowledge it then."""
        try:
            await self.framework.before_acknowledging(self)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception(
                "not acknowledging: the framework could not make its updates durable",
                count=len(statuses),
            )
            return
        try:
            await self._call(
                "Acknowledge", acknowledge_request(self.framework_id, self.stream_id, statuses)
            )
            return
        except SchedulerError as e:
            error = e
        if len(statuses) > 1 and not error.transient and self.connected:
            # The master refused the whole call for one bad entry and applied none: send them
            # one by one so that the good ones still count and only the bad one fails.
            self._log.warning(
                "acknowledgements refused; sending them one by one",
                count=len(statuses),
                error=str(error),
            )
            for status in statuses:
                if not self.connected:
                    break  # the stream is gone: the agents resend the rest
                await self._send_acks([status])
            return
        self._log.warning(
            "acknowledgement failed",
            count=len(statuses),
            task_ids=[s.task_id for s in statuses[:10]],
            error=str(error),
        )

    async def _end(self, message: str, code: grpc.StatusCode | None = None) -> None:
        self._ended = message
        self._ended_code = code
        if code in _REFUSALS:
            address = str(getattr(self.transport, "address", "") or "the master")
            failure = classify(code, message, address)
            credentials = getattr(self.transport, "credentials", None) or INSECURE
            getattr(self._log, self._said.level(failure))(
                f"the master refused the subscription: {failure}",
                principal=credentials.principal or "(anonymous)",
                acl_action="register_frameworks",
                role=self.info.role or "*",
            )
        else:
            self._log.error("the master ended the subscription", message=message)
        await self._callback("on_error", message)
        self.stop()

    async def _callback(self, name: str, *args: object) -> bool:
        try:
            await getattr(self.framework, name)(self, *args)
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug in one callback must not take the connection (and every task) down with it.
            self._log.exception("framework callback raised", callback=name)
            return False
        return True

    # --- calls -------------------------------------------------------------------------------

    async def _call(self, method: str, request: Message) -> Message:
        session = self._session
        if session is None or not session.subscribed or session.ended:
            raise SchedulerError(
                grpc.StatusCode.UNAVAILABLE,
                f"{method}: not subscribed to the master right now (reconnecting); "
                "offers in hand are void, wait for on_subscribed",
            )
        try:
            return await self.transport.call(method, request)
        except SchedulerError as e:
            if is_stale_stream_error(e) and session is self._session:
                self._resync(session, str(e))
            raise

    def _ids(self) -> _Ids:
        return {"framework_id": self.framework_id, "stream_id": self.stream_id}

    async def launch(
        self,
        offers: OfferLike | Iterable[OfferLike],
        tasks: Iterable[common_pb2.TaskInfo],
        filters: common_pb2.Filters | None = None,
        *,
        refuse_seconds: float | None = None,
    ) -> None:
        """Launches `tasks` on one or more offers of the same agent (see `fit`/`OfferPacker`).

        What the tasks leave of the offers goes back to the master, refused to this framework
        for `refuse_seconds` (master default 5 s). No tasks is a decline.
        """
        task_list = list(tasks)
        for task in task_list:
            if not isinstance(task, common_pb2.TaskInfo):
                raise TypeError(
                    f"launch takes TaskInfo messages (from fit/OfferPacker), "
                    f"got {type(task).__name__}"
                )
        operations = []
        if task_list:
            launch = scheduler_pb2.Operation.Launch(task_infos=task_list)
            operations.append(scheduler_pb2.Operation(launch=launch))
        request = scheduler_pb2.AcceptRequest(
            **self._ids(),
            offer_ids=_offer_ids(offers),
            operations=operations,
            filters=_filters(filters, refuse_seconds),
        )
        self._log.debug(
            "launching", offer_ids=list(request.offer_ids), task_ids=[t.task_id for t in task_list]
        )
        # In flight from before the call: the master may die with the call under way.
        self.pending.launched([(t.task_id, t.agent_id) for t in task_list])
        try:
            try:
                await self._call("Accept", request)
            except SchedulerError as e:
                if e.reason in _CONFLICTS:
                    raise OfferConflict(e) from None
                raise
            self._wants.launched(task_list)
        except SchedulerError as e:
            if not e.transient:  # refused outright: nothing was launched
                self.pending.not_launched([t.task_id for t in task_list])
            else:  # it may have been launched: ask until we know
                self.pending.ask([(t.task_id, t.agent_id) for t in task_list])
                self._pending_grew.set()
            raise

    async def decline(
        self, offers: OfferLike | Iterable[OfferLike], refuse_seconds: float | None = None
    ) -> None:
        """Returns offers unused; the master offers their resources to this framework again
        after `refuse_seconds` (default 5 s), or at once after `revive()`."""
        ids = _offer_ids(offers, allow_empty=True)
        if not ids:
            return
        request = scheduler_pb2.DeclineRequest(
            **self._ids(), offer_ids=ids, filters=_filters(None, refuse_seconds)
        )
        await self._call("Decline", request)

    async def kill(
        self, task_id: str, agent_id: str | None = None, grace_period_seconds: float | None = None
    ) -> None:
        """Asks for a task to be killed; a TASK_KILLED update follows."""
        request = scheduler_pb2.KillRequest(
            **self._ids(),
            task_id=task_id,
            agent_id=agent_id or "",
            grace_period_seconds=grace_period_seconds or 0.0,
        )
        await self._call("Kill", request)

    async def revive(
        self, wants: Resources | None = None, smallest: Resources | None = None
    ) -> None:
        """Asks for offers again: ends suppression and clears decline filters.

        `wants`: what the framework waits to launch, in total (5 tasks of cpus:1;mem:128 is
        cpus:5;mem:640). The master then offers only as many agents as cover it, instead of
        every agent with room, and takes what each launch uses off it; `smallest`, the least
        of each resource a waiting task asks for, keeps offers too small for any task away.
        Without `wants` there is no limit (Mesos' way). Keep it current with `want()`."""
        request = scheduler_pb2.ReviveRequest(**self._ids())
        if wants is not None:
            request.wants.CopyFrom(wants_proto(wants, smallest))
        await self._call("Revive", request)
        self._wants.told(wants, smallest)

    async def want(self, wants: Resources | None, smallest: Resources | None = None) -> bool:
        """Tells the master what this framework waits to launch now, in total (see `revive`);
        None lifts the limit (with a Revive). Call it after every round of offers: it is sent
        only when it differs from the master's count, which is what was last told less what
        launched since (a queue that only drains sends nothing). Returns whether it was sent."""
        if not self._wants.differs(wants, smallest):
            return False
        if wants is None:
            await self.revive()
            return True
        request = scheduler_pb2.DemandRequest(**self._ids())
        if self._demand_told is not None:  # a Demand replaces the unmet task: keep it
            unmet, request.priority = self._demand_told
            request.unmet.extend(unmet.to_proto())
        request.wants.CopyFrom(wants_proto(wants, smallest))
        await self._call("Demand", request)
        self._wants.told(wants, smallest)
        return True

    async def cluster_view(self) -> scheduler_pb2.ClusterView:
        """The whole cluster's resources now: every agent's total, free, offered (to any
        framework) and used, for planning beyond the offers in hand (launches still go through
        offers)."""
        request = scheduler_pb2.ClusterViewRequest(**self._ids())
        view = await self._call("GetClusterView", request)
        assert isinstance(view, scheduler_pb2.ClusterView)
        return view

    async def hold(
        self,
        count: int,
        resources: Resources | str,
        *,
        distinct_agents: bool = False,
        timeout_seconds: float | None = None,
    ) -> str:
        """Asks the master to hold resources for this framework as they free up, until `count`
        tasks of `resources` each fit (one per agent with `distinct_agents`), for at most
        `timeout_seconds` (master default 60 s). Returns the hold's id.

        Met: everything held arrives in one `on_held_offers` call (offers no other framework
        can take; by default passed on to `on_offers`), then `on_hold(driver, hold_id, "MET",
        message)`. Timed out: "EXPIRED", and what it held is released. A hold above the
        framework's fair share is refused (FAILED_PRECONDITION); it ends, silently, if the
        subscription does."""
        size = Resources.parse(resources) if isinstance(resources, str) else resources
        request = scheduler_pb2.HoldRequest(
            **self._ids(),
            count=count,
            resources=size.to_proto(),
            distinct_agents=distinct_agents,
            timeout_seconds=timeout_seconds or 0.0,
        )
        reply = await self._call("Hold", request)
        assert isinstance(reply, scheduler_pb2.HoldResponse)
        return reply.hold_id

    async def release_hold(self, hold_id: str) -> None:
        """Gives a hold up; what it collected is released (then `on_hold(..., "RELEASED")`)."""
        await self._call(
            "ReleaseHold", scheduler_pb2.ReleaseHoldRequest(**self._ids(), hold_id=hold_id)
        )

    async def suppress(self) -> None:
        """Stops offers until `revive()`: for a framework with nothing (more) to launch."""
        await self._call("Suppress", scheduler_pb2.SuppressRequest(**self._ids()))

    async def demand(self, unmet: Resources | None, priority: int = 0) -> None:
        """Tells the master the smallest task this framework waits to place that no offer
        could hold (None: none). Where the operator turned preemption on, a role owed
        resources (its quota guarantee, its fair share) gets them from roles above theirs
        after a timeout: tasks are stopped for it (TASK_KILLED, REASON_PREEMPTED).

        Call it after every round of offers: it is sent only when it changed since the last
        one the master took on this subscription (a new subscription starts with none)."""
        told = (unmet, priority) if unmet else None
        if told == self._demand_told:
            return
        request = scheduler_pb2.DemandRequest(**self._ids(), priority=priority)
        if unmet:
            request.unmet.extend(unmet.to_proto())
        await self._call("Demand", request)
        self._demand_told = told

    async def reconcile(self, tasks: Iterable[TaskRef] | None = None) -> None:
        """Asks for the latest state of tasks, answered by UPDATE events without a uuid.

        No argument (implicit): every task the master knows of this framework. Otherwise task
        ids, (task_id, agent_id) pairs, TaskStatus or TaskInfo messages (explicit: an unknown
        task is answered TASK_UNKNOWN).
        """
        request = scheduler_pb2.ReconcileRequest(**self._ids())
        refs = [_task_ref(task) for task in tasks or ()]
        for task_id, agent_id in refs:
            request.tasks.add(task_id=task_id, agent_id=agent_id)
        if refs:
            # Asked again with backoff until answered: the master does not answer for a task
            # of an agent that has not re-registered yet.
            self.pending.ask(refs)
            self._pending_grew.set()
        await self._call("Reconcile", request)

    async def _ask_until_answered(self) -> None:
        """Re-sends explicit reconciliation for unanswered tasks: 0.5 s, 1 s, 2 s ... 8 s apart
        while any remain, on whichever subscription is current."""
        while True:
            if not self.pending.asked:
                self._pending_grew.clear()
                await self._pending_grew.wait()
                continue
            # A plain sleep: tasks asked about meanwhile were asked at once by reconcile(), and
            # a framework that keeps reconciling must not postpone the others' second ask.
            await asyncio.sleep(next_ask_delay(self.pending.rounds + 1))
            todo = self.pending.to_ask()
            if not todo or not self.connected:
                continue
            self.pending.rounds += 1
            self._log.info("asking again about tasks with no answer", tasks=len(todo))
            for start in range(0, len(todo), 1000):
                request = scheduler_pb2.ReconcileRequest(**self._ids())
                for task_id, agent_id in todo[start : start + 1000]:
                    request.tasks.add(task_id=task_id, agent_id=agent_id)
                try:
                    await self._call("Reconcile", request)
                except SchedulerError as e:
                    self._log.debug("reconciliation failed; will ask again", error=str(e))
                    break

    async def acknowledge(self, status: common_pb2.TaskStatus) -> None:
        """Acknowledges an update so its agent stops resending it; needed only with
        `implicit_acknowledgements = False`. Updates without a uuid need none (a no-op)."""
        if not status.uuid:
            return
        # A call of its own, not the batcher's: an error here is about this update alone.
        request = acknowledge_request(self.framework_id, self.stream_id, [status])
        await self._call("Acknowledge", request)

    async def teardown(self) -> None:
        """Removes the framework from the master (its running tasks are killed) and stops.

        Called from `on_update`, the update being handled is acknowledged first."""
        if asyncio.current_task() is self._dispatcher:  # called from on_update
            pending, self._pending_ack = self._pending_ack, None
            if pending is not None:
                self._acks.add(pending)
        await self._flush_acks()
        self._tearing_down = True
        try:
            await self._call("Teardown", scheduler_pb2.TeardownRequest(**self._ids()))
        except BaseException:
            self._tearing_down = False
            raise
        self._log.info("framework torn down")
        self.stop()


def _offer_ids(offers: OfferLike | Iterable[OfferLike], allow_empty: bool = False) -> list[str]:
    items = [offers] if isinstance(offers, common_pb2.Offer | str) else list(offers)
    ids = [item if isinstance(item, str) else item.offer_id for item in items]
    if not ids and not allow_empty:
        raise ValueError("name at least one offer")
    return ids


def _filters(filters: common_pb2.Filters | None, refuse_seconds: float | None):
    if filters is not None and refuse_seconds is not None:
        raise ValueError("give filters or refuse_seconds, not both")
    if refuse_seconds is not None:
        if refuse_seconds < 0:
            raise ValueError("refuse_seconds must not be negative")
        return common_pb2.Filters(refuse_seconds=refuse_seconds)
    return filters


def _task_ref(task: TaskRef) -> tuple[str, str]:
    if isinstance(task, str):
        return task, ""
    if isinstance(task, tuple):
        return task[0], task[1] or ""
    return task.task_id, task.agent_id


def framework_info(
    name: str,
    *,
    role: str = "*",
    failover_timeout: float = 600.0,
    capabilities: Sequence[str] = (),
    service_address: str = "",
    framework_id: str = "",
    user: str | None = None,
    hostname: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> common_pb2.FrameworkInfo:
    """The FrameworkInfo to subscribe with; user and hostname default to this process's."""
    if failover_timeout < 0:
        raise ValueError("failover_timeout must not be negative")
    return common_pb2.FrameworkInfo(
        framework_id=framework_id,
        name=name,
        user=user if user is not None else getpass.getuser(),
        role=role or "*",
        failover_timeout_seconds=failover_timeout,
        capabilities=list(capabilities),
        hostname=hostname if hostname is not None else socket.gethostname(),
        service_address=service_address,
        labels=dict(labels or {}),
    )


async def run_async(
    framework: Framework,
    master: str = "127.0.0.1:5050",
    name: str | None = None,
    role: str = "*",
    failover_timeout: float = 600.0,
    capabilities: Sequence[str] = (),
    service_address: str = "",
    *,
    framework_id: str = "",
    labels: Mapping[str, str] | None = None,
    transport: SchedulerTransport | None = None,
    credentials: Credentials | None = None,
) -> None:
    """Runs `framework` against the master at `master` until it calls `driver.stop()`.

    `failover_timeout` is how long (seconds) the master keeps the framework and its tasks while
    it is disconnected; the driver re-subscribes with the same id within it. Pass the
    `framework_id` of an earlier run to take over from it (failover). `credentials`: mutual
    TLS (`Credentials.load(ca, cert, key)`); by default from AGORA_TLS_CA/CERT/KEY, else none.
    """
    info = framework_info(
        name or type(framework).__name__,
        role=role,
        failover_timeout=failover_timeout,
        capabilities=capabilities,
        service_address=service_address,
        framework_id=framework_id,
        labels=labels,
    )
    if transport is None:
        transport = GrpcSchedulerTransport(master, credentials=credentials)
    driver = Driver(framework, transport, info)
    await driver.run()


def run(
    framework: Framework,
    master: str = "127.0.0.1:5050",
    name: str | None = None,
    role: str = "*",
    failover_timeout: float = 600.0,
    capabilities: Sequence[str] = (),
    service_address: str = "",
    **kwargs: object,
) -> None:
    """Blocking `run_async` (asyncio.run): returns when the framework calls `driver.stop()`."""
    if not structlog.is_configured():
        # The SDK's own lines go to stderr (info and up), apart from what the framework prints;
        # call agora.common.configure_logging first to choose otherwise.
        from agora.common.logs import configure_logging

        configure_logging("info")
    try:
        asyncio.run(
            run_async(
                framework,
                master,
                name,
                role,
                failover_timeout,
                capabilities,
                service_address,
                **kwargs,  # type: ignore[arg-type]
            )
        )
    except KeyboardInterrupt:
        # Ctrl-C: stop without a traceback. The master keeps the framework and its tasks for
        # its failover timeout, so a restart with the same framework id takes them back.
        log.info("interrupted (Ctrl-C)", failover_timeout=failover_timeout)
        raise SystemExit(130) from None


class _SilenceTimer:
    """Expires an asyncio.timeout() once nothing was heard for `limit` seconds (None: never).

    One timer a `limit`, not one an event: the reader only notes the time of each event, and
    the timer, when it fires, either expires the guard or moves itself to `limit` after the
    last event. (A timeout around every read cost a framework's loop a tenth of its time under
    load: each event armed and cancelled a timer.)"""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.expired_after = limit or 0.0
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._guard: asyncio.Timeout | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self, guard: asyncio.Timeout) -> None:
        self._guard = guard
        self._last = self._loop.time()
        self._check()

    def heard(self) -> None:
        self._last = self._loop.time()

    def set_limit(self, limit: float | None) -> None:
        """A new limit from now on (SUBSCRIBED gives the heartbeat's)."""
        self.limit = limit
        if self._timer is not None:
            self._timer.cancel()
        self._check()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._guard = None

    def _check(self) -> None:
        self._timer = None
        if self._guard is None or self.limit is None:
            return
        due = self._last + self.limit
        if self._loop.time() >= due:
            self.expired_after = self.limit
            self._guard.reschedule(self._loop.time())  # the read raises TimeoutError
        else:
            self._timer = self._loop.call_at(due, self._check)
