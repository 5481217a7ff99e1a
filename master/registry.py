"""What the master knows, as plain data: agents, frameworks, tasks and outstanding offers."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import structlog

from agora.common import EMPTY, Resources
from agora.common.batches import Batcher
from agora.master.clock import Timer
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

# Agent states as the Operator API reports them.
ACTIVE = "ACTIVE"
DISCONNECTED = "DISCONNECTED"
DRAINING = "DRAINING"
# Known from the state store after a master restart, not yet re-registered.
RECOVERING = "RECOVERING"

# How many gone offers to remember (for telling a framework that an offer was rescinded rather
# than never existed), and master-made updates held for a disconnected framework.
COMPLETED_TASKS_KEPT = 1000
GONE_OFFERS_KEPT = 10_000


@dataclass(frozen=True)
class Bounds:
    """How much history the master keeps (in memory and, for removals, in its store); the oldest
    goes first. Mesos' --max_completed_tasks_per_framework, --max_completed_frameworks and
    --registry_max_agent_count."""

    # Ended tasks kept per framework (for ListTasks, the dashboard and reconciliation answers).
    completed_tasks_per_framework: int = 1000
    # Torn-down frameworks remembered (refusing their ids) with their ended tasks.
    removed_frameworks: int = 1000
    # Removed agents remembered (told to register afresh rather than come back).
    removed_agents: int = 10_000


def master_status(
    task_id: str,
    state: common_pb2.TaskState,
    *,
    framework_id: str,
    agent_id: str,
    message: str,
    reason: str,
    at: float,
) -> common_pb2.TaskStatus:
    """A master-generated update: no uuid, so it needs no acknowledgement. `at`: its time,
    from the master's clock's wall()."""
    return common_pb2.TaskStatus(
        task_id=task_id,
        state=state,
        message=message,
        reason=reason,
        source=common_pb2.TaskStatus.SOURCE_MASTER,
        agent_id=agent_id,
        framework_id=framework_id,
        timestamp=at,
    )


# How many messages may wait for one peer before it is taken for a reader that stopped reading.
DEFAULT_MAX_QUEUED = 50_000


class Session:
    """One open stream to an agent or framework: what the master sends waits in `pending`.

    Two ways to drain it. A framework's Subscribe pulls with `next()`, which gives None once
    the session is closed and what was sent before has gone. An agent's stream is pushed:
    `push_to(write)` writes each message from a task that exists only while there is
    something to write, so an idle agent costs its stream handler and nothing else (no
    queue, no reader or writer task: at 50,000 agents these were a third of the master's
    memory). Closing a pushed session ends its handler's read (`reading`) once what is
    pending is written; the handler then returns normally.

    The pending messages are bounded: a peer that stops reading (gRPC's flow control holds
    the writer) would otherwise make the master's memory grow without end. Past `max_queued`
    messages the stream is cut (its handler task, `owner`, is cancelled, as the writer may be
    blocked) and what waited is dropped; the peer reconnects and, as after any disconnection,
    fails over: agents resend unacknowledged updates, frameworks reconcile.
    """

    __slots__ = (
        "pending",
        "batcher",
        "closed",
        "max_queued",
        "overflowed",
        "owner",
        "reading",
        "ending",
        "_waiter",
        "_write",
        "_writer",
    )

    def __init__(self, max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        # Made on the first send and dropped when drained: an empty deque is 600 bytes.
        self.pending: deque | None = None
        # Set when the peer reads batches: what waits is then written as one message.
        self.batcher: Batcher | None = None
        self.closed = False
        self.max_queued = max_queued
        self.overflowed = False
        self.owner: asyncio.Task | None = None  # the stream handler's task
        # Pushed sessions: the handler is awaiting the peer's next message (safe to interrupt),
        # and `ending` says that interruption is the session closing, not the call cancelled.
        self.reading = False
        self.ending = False
        self._waiter: asyncio.Future | None = None  # next() waiting for a message
        self._write = None  # push_to's coroutine function
        self._writer: asyncio.Task | None = None

    def send(self, message) -> None:
        if self.closed:
            return
        if self.pending is None:
            self.pending = deque()
        elif len(self.pending) >= self.max_queued:
            self._overflow()
            return
        self.pending.append(message)
        self._wake()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._wake()

    async def next(self):
        """The next message to send; None once the session is closed and what was sent before
        it closed has been taken."""
        while True:
            while not self.pending:
                if self.closed:
                    return None
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            if self.batcher is not None:
                await self.batcher.settle(self.pending[0], len(self.pending))
            if self.pending:  # else it closed (overflow) during the turn: the loop says so
                return self._take()

    def _take(self):
        pending = self.pending
        assert pending
        return self.batcher.take(pending) if self.batcher is not None else pending.popleft()

    async def push_to(self, write) -> None:
        """Writes what is pending with `await write(message)`, here (a registration's reply
        needs no task of its own); from then on messages are written as they are sent."""
        while self.pending:
            await write(self.pending.popleft())
        self.pending = None
        self._write = write
        self._wake()

    async def drain(self) -> None:
        """Waits until what is pending has been written (pushed sessions)."""
        while self._writer is not None:
            await asyncio.shield(self._writer)

    def stop_writing(self) -> None:
        """The stream is over: a write still under way is abandoned."""
        self._write = None
        if self._writer is not None:
            self._writer.cancel()

    def _wake(self) -> None:
        if self._waiter is not None:
            if not self._waiter.done():
                self._waiter.set_result(None)
        elif self._write is not None and self._writer is None:
            if self.pending:
                self._writer = asyncio.get_running_loop().create_task(self._push())
            elif self.closed:
                self._end_read()

    async def _push(self) -> None:
        try:
            while self.pending and self._write is not None:
                if self.batcher is not None:
                    await self.batcher.settle(self.pending[0], len(self.pending))
                    if not self.pending or self._write is None:
                        break
                await self._write(self._take())
        except Exception as e:  # the peer is gone: the handler's read ends too
            log.info("stream write failed", error=repr(e))
            self.closed = True
            self.pending = None
        finally:
            self._writer = None
        if not self.pending:
            self.pending = None
        if self.closed:
            self._end_read()

    def _end_read(self) -> None:
        # Only a handler parked in its read is interrupted; one busy elsewhere sees `closed`
        # at its next turn of the loop.
        owner = self.owner
        if self.overflowed or owner is None or owner.done() or owner.cancelling():
            return  # cut already (overflow, server stop): that cancellation stands
        if self.reading:
            self.ending = True
            owner.cancel()

    def _overflow(self) -> None:
        log.warning(
            "disconnecting a peer that stopped reading its stream",
            queued=len(self.pending or ()),
            limit=self.max_queued,
        )
        self.overflowed = True
        self.closed = True
        self.pending = None
        self._wake()  # a next() waiting gets None; a pushed session's read is left to below
        if self.owner is not None and not self.owner.done():
            self.owner.cancel()


@dataclass(frozen=True)
class OfferTemplate:
    """What every offer of one agent registration shares, serialized: merged into a new Offer
    it costs a tenth of building the same fields from Python (10,000 offers: 16 ms, not 150)."""

    info: common_pb2.AgentInfo  # the registration it was made from (compared by identity)
    agent_part: bytes  # agent_id, hostname, attributes, agent_address
    total_part: bytes  # resources: the agent's whole total (a full agent's offer)


@dataclass
class Agent:
    info: common_pb2.AgentInfo  # agent_id set
    total: Resources
    attributes: dict[str, str]
    registered_at: float  # wall clock
    last_seen: float  # monotonic; silence is measured from here
    last_heartbeat_at: float = 0.0  # wall clock, for people
    state: str = ACTIVE
    draining: bool = False
    # While draining: when its tasks are killed (wall clock; 0: never), and the timer for it.
    drain_deadline: float = 0.0
    drain_timer: Timer | None = None
    # Past its timeout but held back by the removal rate limit (said once in the log).
    removal_deferred: bool = False
    session: Session | None = None
    # Who registered it (its certificate's name): only they may register under its id again.
    principal: str = ""
    # Its offers' fixed part, serialized once per registration (OfferCycle builds it).
    offer_template: OfferTemplate | None = None

    @property
    def agent_id(self) -> str:
        return self.info.agent_id

    @property
    def connected(self) -> bool:
        return self.session is not None and not self.session.closed

    def send(self, message: agent_link_pb2.MasterMessage) -> bool:
        """Sends on the agent's stream if it has one open; False if not."""
        if self.session is None or self.session.closed:
            return False
        self.session.send(message)
        return True

    def drain_event(self) -> scheduler_pb2.Event:
        """What its frameworks are told of its drain (started, or ended: draining False)."""
        drain = scheduler_pb2.Event.AgentDrain(
            agent_id=self.agent_id, draining=self.draining, deadline=self.drain_deadline
        )
        return scheduler_pb2.Event(agent_drain=drain)

    def kill(
        self, framework_id: str, task_id: str, grace: float = 0.0, reason: str = "", why: str = ""
    ) -> bool:
        """Tells the agent to kill a task (after `grace` when > 0, else the task's own), with
        the master's `reason` and `why` for its TASK_KILLED when it is the master's doing."""
        kill = agent_link_pb2.MasterMessage.KillTask(
            framework_id=framework_id,
            task_id=task_id,
            grace_period_seconds=grace,
            reason=reason,
            message=why,
        )
        return self.send(agent_link_pb2.MasterMessage(kill_task=kill))


@dataclass
class Framework:
    info: common_pb2.FrameworkInfo  # framework_id set
    registered_at: float
    session: Session | None = None
    stream_id: str = ""
    # Who subscribed it: only they may fail over to it or act for it ("" until known).
    principal: str = ""
    suppressed: bool = False
    # The smallest task it waits to place that nothing free holds (Demand); None: none.
    unmet: Resources | None = None
    unmet_priority: int = 0  # that task's priority
    # Pending teardown while disconnected.
    failover_timer: Timer | None = None
    # Master-generated updates (no uuid, so nobody resends them) made while disconnected,
    # delivered on re-subscription; the oldest go first past COMPLETED_TASKS_KEPT.
    missed_updates: deque[common_pb2.TaskStatus] = field(
        default_factory=lambda: deque(maxlen=COMPLETED_TASKS_KEPT)
    )

    @property
    def framework_id(self) -> str:
        return self.info.framework_id

    @property
    def role(self) -> str:
        return self.info.role or "*"

    @property
    def connected(self) -> bool:
        return self.session is not None and not self.session.closed

    def send(self, event: scheduler_pb2.Event) -> bool:
        """Sends on the framework's stream if it has one open; False if not."""
        if self.session is None or self.session.closed:
            return False
        self.session.send(event)
        return True


@dataclass
class Task:
    framework_id: str
    agent_id: str
    info: common_pb2.TaskInfo
    resources: Resources
    state: common_pb2.TaskState = common_pb2.TASK_STAGING
    last_status: common_pb2.TaskStatus | None = None
    # The uuid of the agent's final update until the framework acknowledges it. The agent keeps
    # the run (and ignores a RunTask of the same id) until then, and a resend of that update
    # would land on a relaunch: the id stays in use meanwhile.
    final_uuid: bytes = b""
    # Its framework's name when launched: a torn-down framework's ended tasks are still found
    # by it (`agora task logs --framework NAME`). One string shared by the framework's tasks.
    framework_name: str = ""

    @property
    def task_id(self) -> str:
        return self.info.task_id

    @property
    def key(self) -> tuple[str, str]:
        return (self.framework_id, self.task_id)


@dataclass(slots=True)
class Offer:
    offer_id: str
    framework_id: str
    agent_id: str
    resources: Resources
    created_at: float  # monotonic
    # True: the allocator keeps its resources for the framework alone (pessimistic offers, a
    # met hold's). False: an optimistic offer, which keeps nothing and may overlap others'.
    exclusive: bool = True
    revocable: bool = False  # revocable resources (allocator/revocable.py): hold nothing


@dataclass
class Registry:
    agents: dict[str, Agent] = field(default_factory=dict)
    frameworks: dict[str, Framework] = field(default_factory=dict)
    # Live tasks keyed by (framework_id, task_id); ended ones move to `completed`.
    tasks: dict[tuple[str, str], Task] = field(default_factory=dict)
    completed: OrderedDict[tuple[str, str], Task] = field(default_factory=OrderedDict)
    offers: dict[str, Offer] = field(default_factory=dict)
    # offer_id -> why it is gone ("rescinded", "declined", "accepted", ...).
    gone_offers: OrderedDict[str, str] = field(default_factory=OrderedDict)
    # id -> why, oldest first; bounded by `bounds` (note_removed).
    removed_agents: OrderedDict[str, str] = field(default_factory=OrderedDict)
    removed_frameworks: OrderedDict[str, str] = field(default_factory=OrderedDict)
    bounds: Bounds = field(default_factory=Bounds)
    # Indexes of `offers` and `tasks` by agent and by framework, kept by the methods below
    # (add through them, never into the dicts directly): registration, disconnection, failover
    # and teardown look at one agent's or framework's share, not at the whole cluster's.
    _agent_offers: dict[str, dict[str, Offer]] = field(default_factory=dict, repr=False)
    _framework_offers: dict[str, dict[str, Offer]] = field(default_factory=dict, repr=False)
    _agent_tasks: dict[str, dict[tuple[str, str], Task]] = field(default_factory=dict, repr=False)
    _framework_tasks: dict[str, dict[tuple[str, str], Task]] = field(
        default_factory=dict, repr=False
    )
    # `completed` by framework, oldest first, for the per-framework bound.
    _framework_completed: dict[str, OrderedDict[tuple[str, str], Task]] = field(
        default_factory=dict, repr=False
    )

    # offers -------------------------------------------------------------------------------

    def add_offer(self, offer: Offer) -> None:
        self.offers[offer.offer_id] = offer
        _index(self._agent_offers, offer.agent_id, offer.offer_id, offer)
        _index(self._framework_offers, offer.framework_id, offer.offer_id, offer)

    def drop_offer(self, offer_id: str, why: str) -> Offer | None:
        offer = self.offers.pop(offer_id, None)
        if offer is not None:
            _unindex(self._agent_offers, offer.agent_id, offer_id)
            _unindex(self._framework_offers, offer.framework_id, offer_id)
            self.gone_offers[offer_id] = why
            while len(self.gone_offers) > GONE_OFFERS_KEPT:
                self.gone_offers.popitem(last=False)
        return offer

    def offers_of_agent(self, agent_id: str) -> list[Offer]:
        return list(self._agent_offers.get(agent_id, {}).values())

    def offers_of_framework(self, framework_id: str) -> list[Offer]:
        return list(self._framework_offers.get(framework_id, {}).values())

    # tasks --------------------------------------------------------------------------------

    def add_task(self, task: Task) -> None:
        """Makes `task` live (replacing a live task of the same key)."""
        old = self.tasks.get(task.key)
        if old is not None:
            _unindex(self._agent_tasks, old.agent_id, old.key)
        self.tasks[task.key] = task
        _index(self._agent_tasks, task.agent_id, task.key, task)
        _index(self._framework_tasks, task.framework_id, task.key, task)

    def move_task(self, task: Task, agent_id: str) -> None:
        """The task runs on `agent_id` (an agent re-registered with it)."""
        if self.tasks.get(task.key) is task:
            _unindex(self._agent_tasks, task.agent_id, task.key)
            _index(self._agent_tasks, agent_id, task.key, task)
        task.agent_id = agent_id

    def tasks_of_agent(self, agent_id: str) -> list[Task]:
        return list(self._agent_tasks.get(agent_id, {}).values())

    def tasks_of_framework(self, framework_id: str) -> list[Task]:
        return list(self._framework_tasks.get(framework_id, {}).values())

    def find_task(self, framework_id: str, task_id: str) -> Task | None:
        return self.tasks.get((framework_id, task_id)) or self.completed.get(
            (framework_id, task_id)
        )

    def complete_task(self, task: Task) -> None:
        """Moves an ended task out of the live table, keeping a bounded history."""
        live = self.tasks.pop(task.key, None)
        if live is not None:
            _unindex(self._agent_tasks, live.agent_id, live.key)
            _unindex(self._framework_tasks, live.framework_id, live.key)
        self.completed[task.key] = task
        self.completed.move_to_end(task.key)
        mine = self._framework_completed.setdefault(task.framework_id, OrderedDict())
        mine[task.key] = task
        mine.move_to_end(task.key)
        while len(mine) > self.bounds.completed_tasks_per_framework:
            key, _ = mine.popitem(last=False)
            self.completed.pop(key, None)

    def note_removed(self, kind: str, removed_id: str, reason: str) -> list[str]:
        """Remembers that an "agent" or a "framework" was removed; returns the ids of the oldest
        removals forgotten to stay within `bounds` (a forgotten framework's ended tasks go with
        it), for the caller to forget in the store too."""
        if kind == "agent":
            table, bound = self.removed_agents, self.bounds.removed_agents
        else:
            table, bound = self.removed_frameworks, self.bounds.removed_frameworks
        table[removed_id] = reason
        table.move_to_end(removed_id)
        forgotten = []
        while len(table) > bound:
            old, _ = table.popitem(last=False)
            forgotten.append(old)
            if kind == "framework" and old not in self.frameworks:
                for key in self._framework_completed.pop(old, {}):
                    self.completed.pop(key, None)
        return forgotten

    def allocated_on_agent(self, agent_id: str, revocable: bool = False) -> dict[str, Resources]:
        """framework_id -> resources its live tasks use on the agent: those on ordinary
        resources (allocations), or with `revocable` those on revocable ones."""
        out: dict[str, Resources] = {}
        for task in self.tasks_of_agent(agent_id):
            if task.info.revocable == revocable:
                out[task.framework_id] = out.get(task.framework_id, EMPTY) + task.resources
        return out


def _index(index: dict, outer: str, key, item) -> None:
    inner = index.get(outer)
    if inner is None:
        inner = index[outer] = {}
    inner[key] = item


def _unindex(index: dict, outer: str, key) -> None:
    items = index.get(outer)
    if items is not None:
        items.pop(key, None)
        if not items:
            del index[outer]
