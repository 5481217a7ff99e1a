"""One emulated agent: the real AgentLink protocol over a (shared) gRPC channel, or carried on
its fleet's one relay stream (experiments/emulated/carrier.py), no processes.

It registers (re-registering with its id and tasks after a broken stream), heartbeats, and
answers RunTask with reliable TASK_STARTING then TASK_RUNNING updates and, after the task's
duration, TASK_FINISHED (or TASK_FAILED with the exit code its label asks for). KillTask ends a
task TASK_KILLED; a kill of an unknown task is reported TASK_LOST. Updates go through the real
agent's UpdateQueue: per task in order, only the oldest unacknowledged one in flight, resent
with exponential backoff until the master forwards the acknowledgement.

Everything runs on callbacks and timers of the event loop plus one reader task per agent, so a
process holds thousands of them.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import structlog

from agora.agent.link_policy import WaitReason, retry_delay, silence_limit
from agora.agent.update_queue import UpdateQueue
from agora.common import Resources, attributes_to_proto
from agora.common.backoff import Backoff
from agora.common.batches import Batcher, agent_batches
from agora.common.rpc import describe_rpc_error, drain_queue
from agora.common.task_states import TERMINAL_STATES
from agora.experiments.emulated.tasks import Sampler, declared_duration, exit_code, has_command
from agora.v1 import agent_link_pb2, agent_link_pb2_grpc, common_pb2

log = structlog.get_logger(__name__)

AgentMessage = agent_link_pb2.AgentMessage
MasterMessage = agent_link_pb2.MasterMessage
VERSION = "0.1.0-emulated"


@dataclass
class AgentStats:
    """Counters a fleet adds up; plain ints so reading them costs nothing."""

    registrations: int = 0
    heartbeats_sent: int = 0
    messages_received: int = 0
    updates_sent: int = 0
    updates_resent: int = 0
    tasks_launched: int = 0
    tasks_finished: int = 0
    tasks_killed: int = 0
    reconnects: int = 0
    busy_refusals: int = 0  # registrations the master turned away (MASTER_BUSY)


@dataclass
class EmulatedTask:
    framework_id: str
    info: common_pb2.TaskInfo
    state: common_pb2.TaskState = common_pb2.TASK_STAGING
    end_timer: asyncio.TimerHandle | None = None
    # True once the terminal update is acknowledged: the task is history.
    completed: bool = False


@dataclass
class AgentSpec:
    """What an emulated agent advertises and how it behaves."""

    resources: Resources
    attributes: dict[str, str] = field(default_factory=dict)
    hostname: str = "emulated"
    # Used until the master states its interval in Registered.
    heartbeat_interval: float = 5.0
    # Intervals (at least 3 s) without an answer to a Register before dialling again.
    missed_heartbeats: int = 3
    reconnect_backoff_initial: float = 0.2
    reconnect_backoff_max: float = 5.0
    update_backoff_initial: float = 0.5
    update_backoff_max: float = 10.0


class EmulatedAgent:
    def __init__(
        self,
        spec: AgentSpec,
        channel: grpc.aio.Channel | None,
        *,
        connect: Callable | None = None,
        default_duration: Sampler,
        stats: AgentStats | None = None,
        on_registered: Callable[[EmulatedAgent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        seed: int | None = None,
    ) -> None:
        self.spec = spec
        # How the link is opened: AgentLink.Connect on `channel`, unless `connect` stands in
        # for it (a fleet carried on one relay stream: experiments/emulated/carrier.py).
        if connect is None:
            if channel is None:
                raise ValueError("an emulated agent needs a channel or a connect")
            connect = agent_link_pb2_grpc.AgentLinkStub(channel).Connect
        self._connect = connect
        self.default_duration = default_duration
        self.stats = stats or AgentStats()
        self.on_registered = on_registered
        self.clock = clock
        self.agent_id = ""
        self.master_id = ""
        self.heartbeat_interval = spec.heartbeat_interval
        self.tasks: dict[tuple[str, str], EmulatedTask] = {}
        self.updates = UpdateQueue(spec.update_backoff_initial, spec.update_backoff_max)
        # When Register was last queued and Registered came back (monotonic): join times.
        self.register_sent_at = 0.0
        self.registered_at = 0.0
        self.registered = asyncio.Event()
        self._rng = random.Random(seed)
        self._outbox: asyncio.Queue | None = None
        self._batcher: Batcher | None = None  # this stream's, enabled by Registered
        self._call = None
        self._runner: asyncio.Task | None = None
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._resend_timer: asyncio.TimerHandle | None = None
        self._last_heard = 0.0
        self._sent: set[bytes] = set()  # uuids sent at least once and not yet acknowledged
        self._dropped = None  # the call we cancelled for silence
        self._log = log.bind(hostname=spec.hostname)

    # lifecycle --------------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        """Starts the link (register, then serve the master) in the background."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name=f"emulated-{self.spec.hostname}")
        return self._runner

    async def stop(self) -> None:
        """Closes the stream as a stopped agent would; its tasks' timers stop too."""
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        for task in self.tasks.values():
            if task.end_timer is not None:
                task.end_timer.cancel()
        self._cancel_timers()

    def active_tasks(self) -> list[EmulatedTask]:
        return [t for t in self.tasks.values() if not t.completed]

    # the link ---------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = Backoff(
            initial=self.spec.reconnect_backoff_initial,
            cap=self.spec.reconnect_backoff_max,
            rng=self._rng,
        )
        while True:
            try:
                await self._session()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except _Reregister:
                continue
            except _Silent:
                self._log.info("the master fell silent; dialling again")
            except Exception as e:  # noqa: BLE001 - every failure means: dial again later
                self._log.debug("agent link failed", error=describe_rpc_error(e))
                delay, why = retry_delay(e, backoff)
                if why is WaitReason.MASTER_BUSY:
                    self.stats.busy_refusals += 1
                self.stats.reconnects += 1
                await asyncio.sleep(delay)
                continue
            self.stats.reconnects += 1
            # Jittered, so a fleet that lost its master does not come back in one wave.
            await asyncio.sleep(backoff.next_delay())

    async def _session(self) -> None:
        outbox: asyncio.Queue = asyncio.Queue()
        outbox.put_nowait(AgentMessage(register=self._build_register()))
        self.register_sent_at = self.clock()
        self._outbox = outbox
        # As a real agent: batches both ways once the master says it reads them.
        self._batcher = batcher = agent_batches()
        call = self._connect(drain_queue(outbox, batcher))
        self._call = call
        self._last_heard = self.clock()
        # Until Registered arrives, the heartbeat timer only watches for silence.
        self._schedule_heartbeat(self.spec.heartbeat_interval)
        try:
            while True:
                try:
                    message = await call.read()
                except asyncio.CancelledError:
                    if self._dropped is call:
                        # We cancelled the call ourselves (silence): grpc reports that as a
                        # CancelledError, which must not end the agent.
                        raise _Silent() from None
                    raise
                if message is grpc.aio.EOF:
                    return
                self._last_heard = self.clock()
                batch = message.batch.messages if message.HasField("batch") else (message,)
                self.stats.messages_received += len(batch)
                for one in batch:
                    self._on_message(one)
        finally:
            self.registered.clear()
            self._outbox = None
            self._call = None
            outbox.put_nowait(None)
            self._cancel_timers()
            call.cancel()

    def _on_message(self, message: MasterMessage) -> None:
        kind = message.WhichOneof("message")
        if kind == "registered":
            self._on_registered(message.registered)
        elif kind == "shutdown":
            self._on_shutdown(message.shutdown)
            raise _Reregister()
        elif not self.registered.is_set():
            return
        elif kind == "run_task":
            self._on_run_task(message.run_task)
        elif kind == "kill_task":
            self._on_kill_task(message.kill_task)
        elif kind == "status_update_ack":
            self._on_ack(message.status_update_ack)
        elif kind == "shutdown_framework":
            for task in list(self.tasks.values()):
                if task.framework_id == message.shutdown_framework.framework_id:
                    self._kill(task)

    def _build_register(self) -> AgentMessage.Register:
        info = common_pb2.AgentInfo(
            agent_id=self.agent_id,
            hostname=self.spec.hostname,
            resources=self.spec.resources.to_proto(),
            attributes=attributes_to_proto(self.spec.attributes),
        )
        tasks = [
            agent_link_pb2.RunningTask(framework_id=t.framework_id, task=t.info, state=t.state)
            for t in self.active_tasks()
        ]
        return AgentMessage.Register(info=info, tasks=tasks, version=VERSION, accepts_batches=True)

    def _send(self, message: AgentMessage) -> bool:
        if self._outbox is None or not self.registered.is_set():
            return False
        self._outbox.put_nowait(message)
        return True

    def _on_registered(self, msg: MasterMessage.Registered) -> None:
        self.agent_id, self.master_id = msg.agent_id, msg.master_id
        if self._batcher is not None:
            self._batcher.enabled = msg.accepts_batches
        self.heartbeat_interval = msg.heartbeat_interval_seconds or self.heartbeat_interval
        self.registered_at = self.clock()
        self.stats.registrations += 1
        self.registered.set()
        # A random phase, so thousands of agents do not heartbeat in step.
        self._schedule_heartbeat(self.heartbeat_interval * self._rng.random())
        # Whatever was not acknowledged goes out again at once, in order.
        self.updates.reset()
        self._flush()
        if self.on_registered is not None:
            self.on_registered(self)

    def _on_shutdown(self, msg: MasterMessage.Shutdown) -> None:
        """The master removed us: our tasks are LOST there already; start afresh."""
        self._log.info("master shut this agent down; registering afresh", reason=msg.reason)
        for task in self.tasks.values():
            if task.end_timer is not None:
                task.end_timer.cancel()
        self.tasks.clear()
        self.updates.drop_all()
        self._sent.clear()
        self.agent_id = ""

    # timers -----------------------------------------------------------------------------

    def _schedule_heartbeat(self, delay: float) -> None:
        if self._heartbeat_timer is not None:
            self._heartbeat_timer.cancel()
        loop = asyncio.get_running_loop()
        self._heartbeat_timer = loop.call_later(delay, self._heartbeat)

    def _heartbeat(self) -> None:
        silence = silence_limit(self.heartbeat_interval, self.spec.missed_heartbeats)
        waiting = not self.registered.is_set()
        if waiting and self.clock() - self._last_heard > silence and self._call is not None:
            # No answer to the Register: dial again. Once registered, the channel's keepalive
            # watches the master (as the real agent's link does: agent/link.py).
            self._dropped = self._call
            self._call.cancel()
            return
        if self._send(AgentMessage(heartbeat=AgentMessage.Heartbeat(timestamp=time.time()))):
            self.stats.heartbeats_sent += 1
        self._schedule_heartbeat(self.heartbeat_interval)

    def _cancel_timers(self) -> None:
        for timer in (self._heartbeat_timer, self._resend_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_timer = self._resend_timer = None

    # tasks ------------------------------------------------------------------------------

    def _on_run_task(self, msg: MasterMessage.RunTask) -> None:
        key = (msg.framework_id, msg.task.task_id)
        existing = self.tasks.get(key)
        if existing is not None and not existing.completed:
            self._log.warning(
                "ignoring RunTask for a task that is already active", task_id=msg.task.task_id
            )
            return
        info = common_pb2.TaskInfo()
        info.CopyFrom(msg.task)
        task = EmulatedTask(msg.framework_id, info)
        self.tasks[key] = task
        self.stats.tasks_launched += 1
        if not has_command(info):
            self._update(
                task, common_pb2.TASK_ERROR, "the task has no command", "REASON_TASK_INVALID"
            )
            return
        self._update(task, common_pb2.TASK_STARTING, "launching the command")
        self._update(task, common_pb2.TASK_RUNNING, "the command is running")
        duration = declared_duration(info)
        if duration is None:
            duration = self.default_duration()
        loop = asyncio.get_running_loop()
        task.end_timer = loop.call_later(duration, self._finish, task)

    def _finish(self, task: EmulatedTask) -> None:
        task.end_timer = None
        if task.state in TERMINAL_STATES:
            return
        code = exit_code(task.info)
        self.stats.tasks_finished += 1
        if code == 0:
            self._update(
                task,
                common_pb2.TASK_FINISHED,
                "exited with code 0",
                "REASON_COMMAND_EXITED",
                exit_code=0,
            )
        else:
            self._update(
                task,
                common_pb2.TASK_FAILED,
                f"exited with code {code}",
                "REASON_COMMAND_EXITED",
                exit_code=code,
            )

    def _on_kill_task(self, msg: MasterMessage.KillTask) -> None:
        task = self.tasks.get((msg.framework_id, msg.task_id))
        if task is None:
            lost = EmulatedTask(msg.framework_id, common_pb2.TaskInfo(task_id=msg.task_id))
            self.tasks[(msg.framework_id, msg.task_id)] = lost
            self._update(
                lost,
                common_pb2.TASK_LOST,
                "the agent does not know this task",
                "REASON_RECONCILIATION",
            )
            return
        self._kill(task)

    def _kill(self, task: EmulatedTask) -> None:
        if task.state in TERMINAL_STATES:
            return  # already ended: its final update is on its way or acknowledged
        if task.end_timer is not None:
            task.end_timer.cancel()
            task.end_timer = None
        self.stats.tasks_killed += 1
        self._update(task, common_pb2.TASK_KILLED, "killed", "REASON_TASK_KILLED")

    # reliable updates -------------------------------------------------------------------

    def _update(
        self,
        task: EmulatedTask,
        state: common_pb2.TaskState,
        message: str,
        reason: str = "",
        exit_code: int | None = None,
    ) -> None:
        task.state = state
        status = common_pb2.TaskStatus(
            task_id=task.info.task_id,
            state=state,
            message=message,
            reason=reason,
            source=common_pb2.TaskStatus.SOURCE_AGENT,
            agent_id=self.agent_id,
            framework_id=task.framework_id,
            timestamp=time.time(),
            uuid=os.urandom(16),
        )
        if exit_code is not None:
            status.exit_code = exit_code
        self.updates.add(task.framework_id, status)
        self._flush()

    def _on_ack(self, msg: MasterMessage.StatusUpdateAck) -> None:
        status = self.updates.ack(msg.framework_id, msg.task_id, msg.uuid)
        if status is None:
            return  # a duplicate acknowledgement
        self._sent.discard(status.uuid)
        if status.state in TERMINAL_STATES and not self.updates.pending(
            msg.framework_id, msg.task_id
        ):
            task = self.tasks.pop((msg.framework_id, msg.task_id), None)
            if task is not None:
                task.completed = True
        self._flush()

    def _flush(self) -> None:
        """Sends every update whose (re)send time has come; schedules the next resend."""
        if not self.registered.is_set():
            return
        now = self.clock()
        for framework_id, status in self.updates.due(now):
            if status.uuid in self._sent:
                self.stats.updates_resent += 1
            self._sent.add(status.uuid)
            status.agent_id = self.agent_id  # the id may be new since the update was made
            self._send(
                AgentMessage(
                    status_update=AgentMessage.StatusUpdate(
                        framework_id=framework_id, status=status
                    )
                )
            )
            self.stats.updates_sent += 1
            self.updates.mark_sent(framework_id, status.task_id, now)
        if self._resend_timer is not None:
            self._resend_timer.cancel()
            self._resend_timer = None
        due = self.updates.next_due()
        if due is not None:
            loop = asyncio.get_running_loop()
            self._resend_timer = loop.call_later(max(0.0, due - now), self._flush)


class _Reregister(Exception):
    """End this stream and register afresh at once (the master removed this agent)."""


class _Silent(Exception):
    """We dropped a stream on which the master had fallen silent."""
