"""MasterCore without gRPC and without real time: scenario tests that run in microseconds.

`CoreHarness` builds the master's state machine with a ManualClock and records every message
the master sends, on whichever stream. Agents and frameworks are driven by direct calls into the
core, as the gRPC services make them; after each call the harness runs the offer cycle the
change asked for, so an assertion made after a call sees the world after a cycle (a "nothing
offered" assertion is never about a cycle that has not run yet). `advance(seconds)` moves the
clock as the master's tick loop would see it: timers fire (failover timeouts), agents heartbeat
unless told to go silent, silent agents are removed, offers time out, decline filters expire.

The same scenarios over real gRPC live in test_master_flow.py and test_master_failures.py,
kept to those that prove the wiring (streams, services, the store across a real restart).
"""

from __future__ import annotations

from pathlib import Path

from master_harness import agent_info, status_update, task

from agora.common import Resources
from agora.master.clock import WALL_START, ManualClock
from agora.master.config import MasterConfig
from agora.master.core import MasterCore
from agora.master.errors import CallError
from agora.master.registry import Session
from agora.master.server import build_allocator
from agora.master.state_store import StateStore
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

AgentMessage = agent_link_pb2.AgentMessage

DEFAULTS = dict(heartbeat_interval_seconds=0.2, agent_timeout_seconds=1.0)


class RecordingSession(Session):
    """A stream as the master sees it, keeping every message sent on it (`items`) and adding
    it to the harness's log of everything sent."""

    def __init__(self, log: list, max_queued: int) -> None:
        super().__init__(max_queued)
        self.items: list = []
        self._log = log

    def send(self, message) -> None:
        if not self.closed:
            self.items.append(message)
            self._log.append((self, message))
        super().send(message)


class Inbox:
    """What one peer received on its current stream; `expect` finds a message by kind."""

    def __init__(self, session: RecordingSession, kind_of) -> None:
        self.session, self.kind_of = session, kind_of

    @property
    def items(self) -> list:
        return self.session.items

    @property
    def closed(self) -> bool:
        return self.session.closed

    def of(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.items if self.kind_of(m) == kind]

    def expect(self, kind: str, predicate=lambda m: True, after: int = 0):
        """The first `kind` message (from index `after`) matching predicate. Everything the
        master does happens inside the call that caused it, so there is nothing to wait for."""
        for item in self.items[after:]:
            if self.kind_of(item) == kind and predicate(getattr(item, kind)):
                return getattr(item, kind)
        seen = [self.kind_of(m) for m in self.items[after:]]
        raise AssertionError(f"no matching {kind} was sent; got {seen}")


class CoreHarness:
    def __init__(
        self, state_dir: Path | None = None, *, wall_start: float = WALL_START, **config
    ) -> None:
        """`wall_start`: the clock's wall() at the start (restart() carries it on)."""
        self.state_dir = state_dir
        self.config = MasterConfig(port=0, state_dir=state_dir, **{**DEFAULTS, **config})
        self.clock = ManualClock(wall_start=wall_start)
        self.sent: list[tuple[RecordingSession, object]] = []  # every message, in order
        self.store = StateStore(self.config.state_path)
        self.core = MasterCore(
            self.config,
            build_allocator(self.config),
            self.store,
            clock=self.clock,
            new_session=self.new_session,
        )
        self.core.recover_state()
        self.agents: list[SimAgent] = []
        self.cycles = 0
        # Run the cycle each call asks for, at once; False leaves it to the test (which may
        # then run the master's own loop step, such as OfferCycle.allocate_in_slices).
        self.auto_settle = True

    def new_session(self, max_queued: int = 1000) -> RecordingSession:
        return RecordingSession(self.sent, max_queued)

    def restart(self, down_for: float = 0.0) -> CoreHarness:
        """A new master over the same state directory (this one's streams are gone), started
        `down_for` seconds of wall time after this one stopped (its monotonic time starts
        afresh, as a new process's would)."""
        self.core.stopping = True
        self.store.close()
        overrides = {
            k: getattr(self.config, k) for k in DEFAULTS if getattr(self.config, k) is not None
        }
        return CoreHarness(self.state_dir, wall_start=self.clock.wall() + down_for, **overrides)

    # --- peers ---------------------------------------------------------------------------

    def agent(
        self, resources: str = "cpus:4;mem:4096;ports:[31000-31099]", connect=True, **kwargs
    ) -> SimAgent:
        """An agent, registered unless `connect` is False (call its connect() then)."""
        agent = SimAgent(self, resources, **kwargs)
        if connect:
            agent.connect()
        return agent

    def framework(self, name: str = "test-fw", subscribe=True, **kwargs) -> SimFramework:
        """A framework, subscribed unless `subscribe` is False (call its subscribe() then)."""
        framework = SimFramework(self, name, **kwargs)
        if subscribe:
            framework.subscribe()
        return framework

    # --- time and cycles -----------------------------------------------------------------

    def settle(self) -> None:
        """Runs the cycle that the changes so far asked for, as the allocation loop would."""
        offers = self.core.offers
        wakeup = self.core.allocator.next_wakeup()
        if wakeup is not None and wakeup <= self.clock.now():
            offers.wake()  # a decline filter expired: a full cycle
        if offers.wanted.is_set():
            offers.wanted.clear()
            offers.allocate(offers.take_changed())
            self.cycles += 1

    def advance(self, seconds: float) -> None:
        """Moves time forward in the tick loop's steps: heartbeats of agents that are not
        silent, timers, silence checks, offer timeouts, filter expiries, cycles."""
        step = min(self.config.heartbeat_interval_seconds, self.config.agent_timeout_seconds / 4)
        end = self.clock.now() + seconds
        while self.clock.now() < end:
            moved = min(step, end - self.clock.now())
            self.clock.advance(moved)
            for agent in self.agents:
                if agent.heartbeating and agent.connected:
                    self.core.agents.heartbeat(agent.agent)
            self.core.tick(moved, check=True)
            self.settle()

    def call(self, method, *args):
        """A core call as a service makes it, then the cycle it asked for."""
        try:
            return method(*args)
        finally:
            if self.auto_settle:
                self.settle()


class SimAgent:
    """An agent's stream, as the master sees it."""

    def __init__(
        self,
        harness: CoreHarness,
        resources: str,
        hostname: str = "host-a",
        attributes: dict[str, str] | None = None,
    ) -> None:
        self.h = harness
        self.resources = Resources.parse(resources)
        self.hostname = hostname
        self.attributes = attributes or {}
        self.agent_id = ""
        self.heartbeating = True
        self.agent = None  # the master's Agent record
        self.session: RecordingSession | None = None
        harness.agents.append(self)

    @property
    def inbox(self) -> Inbox:
        assert self.session is not None
        return Inbox(self.session, lambda m: m.WhichOneof("message"))

    @property
    def connected(self) -> bool:
        return self.agent is not None and self.session is not None and not self.session.closed

    def connect(self, tasks=(), agent_id: str | None = None):
        """Registers (again, with `agent_id`); returns Registered, or None if shut down."""
        if agent_id is not None:
            self.agent_id = agent_id
        info = agent_info(self.agent_id, self.hostname, self.resources, self.attributes)
        self.session, self.agent = self.h.new_session(), None
        register = AgentMessage.Register(info=info, tasks=list(tasks))
        self.agent = self.h.call(self.h.core.agents.register, register, self.session)
        if self.agent is None:
            return None
        registered = self.inbox.expect("registered")
        self.agent_id = registered.agent_id
        return registered

    def status(
        self, framework_id: str, task_id: str, state: int, uuid: bytes | None = None, **fields
    ) -> bytes:
        """Sends a reliable status update; returns its uuid."""
        update = status_update(self.agent_id, framework_id, task_id, state, uuid, **fields)
        self.h.call(self.h.core.tasks.status_update, self.agent, update)
        return update.status.uuid

    def close(self) -> None:
        """The stream breaks (a crashed agent, as the master sees it)."""
        assert self.session is not None
        self.h.call(self.h.core.agents.disconnected, self.agent, self.session)


class SimFramework:
    """A framework's subscription, as the master sees it."""

    def __init__(
        self,
        harness: CoreHarness,
        name: str = "test-fw",
        role: str = "*",
        failover_timeout: float = 60.0,
        capabilities=(),
    ) -> None:
        self.h = harness
        self.info = common_pb2.FrameworkInfo(
            name=name,
            role=role,
            failover_timeout_seconds=failover_timeout,
            capabilities=list(capabilities),
        )
        self.framework_id = ""
        self.stream_id = ""
        self.framework = None  # the master's Framework record
        self.session: RecordingSession | None = None
        self.answered: set[str] = set()  # offers this client accepted or declined

    @property
    def inbox(self) -> Inbox:
        assert self.session is not None
        return Inbox(self.session, lambda e: e.WhichOneof("event"))

    def subscribe(self, framework_id: str | None = None):
        if framework_id is not None:
            self.info.framework_id = framework_id
        self.framework, self.session = self.h.call(self.h.core.frameworks.subscribe, self.info)
        subscribed = self.inbox.expect("subscribed")
        self.framework_id = self.info.framework_id = subscribed.framework_id
        self.stream_id = subscribed.stream_id
        return subscribed

    def ids(self) -> dict:
        return dict(framework_id=self.framework_id, stream_id=self.stream_id)

    def offers(self) -> list[common_pb2.Offer]:
        """The live offers received: not answered, not rescinded."""
        rescinded = {r.offer_id for r in self.inbox.of("rescind")}
        batches = [*self.inbox.of("offers"), *self.inbox.of("hold")]  # a met hold's come in HOLD
        return [
            o
            for batch in batches
            for o in batch.offers
            if o.offer_id not in rescinded and o.offer_id not in self.answered
        ]

    def accept(self, offer_ids, tasks, refuse_seconds: float | None = None) -> list[str]:
        filters = common_pb2.Filters()
        if refuse_seconds is not None:
            filters.refuse_seconds = refuse_seconds
        request = scheduler_pb2.AcceptRequest(
            **self.ids(),
            offer_ids=list(offer_ids),
            filters=filters,
            operations=[
                scheduler_pb2.Operation(
                    launch=scheduler_pb2.Operation.Launch(task_infos=list(tasks))
                )
            ],
        )
        launched = self.h.call(self.h.core.tasks.accept, request)
        self.answered.update(offer_ids)
        return launched

    def call(self, name: str, **fields):
        """A scheduler call by its gRPC name (Decline, Revive, Kill...), naming this stream;
        refusals raise CallError, as the service would answer them."""
        core = self.h.core
        request = getattr(scheduler_pb2, f"{name}Request")(**self.ids(), **fields)
        if name == "Decline":
            self.answered.update(request.offer_ids)
        if name == "Teardown":

            def teardown(request) -> None:
                framework = core.frameworks.for_call(request.framework_id, request.stream_id)
                core.frameworks.teardown(framework, "the framework asked for teardown")

            return self.h.call(teardown, request)
        method = {
            "Decline": core.offers.decline,
            "Revive": core.frameworks.revive,
            "Suppress": core.frameworks.suppress,
            "Demand": core.frameworks.demand,
            "Kill": core.tasks.kill,
            "Acknowledge": core.tasks.acknowledge,
            "Reconcile": core.tasks.reconcile,
            "Hold": core.holds.hold,
            "ReleaseHold": core.holds.release,
        }[name]
        return self.h.call(method, request)

    def close(self) -> None:
        """The stream ends (the framework went away)."""
        assert self.session is not None
        self.h.call(self.h.core.frameworks.disconnected, self.framework, self.session)


__all__ = ["CallError", "CoreHarness", "SimAgent", "SimFramework", "task"]
