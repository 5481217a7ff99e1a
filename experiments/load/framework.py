"""LoadFramework: a framework on the real SDK whose demand is set by a config, for experiments.

Demand is closed-loop (keep up to `max_running` tasks running, each of `cpus`/`mem` for a
sampled duration) or a trace (tasks arrive at their submit times). Offers it cannot use now it
either holds (`hold_offers`, up to `max_held`, to launch on when a task ends) or declines with
`decline_refuse_seconds`; `probe_decline_fraction` of offers are declined at once with
refuse_seconds=0 to time how fast declined resources come back.

Offers are answered off the event path (in a background task, after `decision_delay`), so a
slow decision never delays the next event. Events are timed as they are read off the stream by
`agora.experiments.load.timing.TimedTransport`: run the framework with it.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from agora.common import Resources
from agora.common.task_states import TERMINAL_STATES
from agora.experiments.load.held import HeldOffers
from agora.experiments.load.recorder import Recorder
from agora.experiments.load.workload import Sampler, TraceTask, constant
from agora.frameworks.sdk import Framework, OfferPacker, SchedulerError, TaskSpec, new_task_id
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

DURATION_LABEL = (
    "agora.emulated/duration"  # read by agora.experiments.emulated; real agents run `sleep`
)


@dataclass
class LoadConfig:
    name: str = "load"
    role: str = "*"
    cpus: float = 1.0
    mem: float = 128.0
    duration: Sampler = field(default_factory=lambda: constant(1.0))
    # Tasks arrive at their submit times (seconds after subscribing) instead of closed-loop.
    trace: Sequence[TraceTask] | None = None
    max_running: int | None = None  # None: as many as the offers allow
    max_tasks: int | None = None  # stop launching after this many
    tasks_per_offer: int = 0  # 0: as many as fit
    hold_offers: bool = False
    max_held: int = 1_000_000
    # Held offers still unused after this long go back (refuse_seconds=0); None keeps them.
    max_hold_seconds: float | None = None
    decline_refuse_seconds: float = 5.0  # for offers not used (and leftovers when not holding)
    leftover_refuse_seconds: float = 0.0  # for what a launch leaves of an offer
    probe_decline_fraction: float = 0.0
    decision_delay: float = 0.0
    # Command of a task of duration d: `sleep d` (emulated agents read the label instead);
    # "true" runs `true` whatever the duration (real agents, launch throughput).
    command: str = "sleep"
    seed: int = 1
    # Tell the master (driver.demand) the task it wants and cannot place, after each round of
    # offers, where the master preempts for starved roles (agora experiment preemption).
    tell_demand: bool = False


class LoadFramework(Framework):
    def __init__(self, config: LoadConfig, recorder: Recorder) -> None:
        self.config = config
        self.recorder = recorder
        self.rng = random.Random(config.seed)
        self.driver = None
        self.framework_id = ""
        self.running: dict[str, str] = {}  # task id -> agent id
        self.held = HeldOffers()
        self._held_at: dict[str, float] = {}
        self.launched = 0
        self.ended = 0
        self.failed = 0
        self.pending: deque[TraceTask] = deque()  # trace tasks that have arrived
        self.started_at: float | None = None
        self._background: set[asyncio.Task] = set()
        self._trace_feeder: asyncio.Task | None = None
        self._quiet = False  # no more launches (the run is draining)

    # demand -----------------------------------------------------------------------------

    def _room(self) -> bool:
        c = self.config
        if self._quiet:
            return False
        if c.max_running is not None and len(self.running) >= c.max_running:
            return False
        if c.max_tasks is not None and self.launched >= c.max_tasks:
            return False
        return c.trace is None or bool(self.pending)

    def _next_spec(self) -> tuple[TaskSpec, TraceTask | None]:
        c = self.config
        if c.trace is not None:
            item = self.pending[0]
            cpus, mem, duration = item.cpus, item.mem, item.duration
        else:
            item = None
            cpus, mem, duration = c.cpus, c.mem, c.duration()
        command = "true" if c.command == "true" else f"sleep {duration:.3f}"
        spec = TaskSpec(
            c.name,
            cpus=cpus,
            mem=mem,
            command=command,
            task_id=new_task_id(c.name),
            labels={DURATION_LABEL: f"{duration:.6f}"},
        )
        return spec, item

    def stop_launching(self) -> None:
        """The run is draining: launch nothing more (running tasks end on their own)."""
        self._quiet = True

    # callbacks --------------------------------------------------------------------------

    async def on_subscribed(self, driver, framework_id):
        self.driver = driver
        self.framework_id = framework_id
        if self.started_at is None:
            self.started_at = time.monotonic()
            if self.config.trace is not None:
                self._trace_feeder = self._spawn(self._feed_trace(driver))
            if self.config.max_hold_seconds is not None:
                self._spawn(self._expire_held(driver))

    async def on_offers(self, driver, offers):
        self._spawn(self._decide(driver, list(offers)))

    async def on_update(self, driver, status):
        if status.state in TERMINAL_STATES and status.task_id in self.running:
            del self.running[status.task_id]
            self.ended += 1
            if status.state != common_pb2.TASK_FINISHED:
                self.failed += 1
            if self.held and self._room():
                self._spawn(self._launch_on_held(driver))

    async def on_rescind(self, driver, offer_id):
        self.held.pop(offer_id, None)
        self._held_at.pop(offer_id, None)

    async def on_disconnected(self, driver):
        self.held.clear()

    # decisions --------------------------------------------------------------------------

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "load framework decision failed",
                framework=self.config.name,
                error=repr(task.exception()),
            )

    async def _decide(self, driver, offers: list[common_pb2.Offer]) -> None:
        c = self.config
        if c.decision_delay > 0:
            await asyncio.sleep(c.decision_delay)
        unused: list[common_pb2.Offer] = []
        probes: list[common_pb2.Offer] = []
        for offer in offers:
            if c.probe_decline_fraction > 0 and self.rng.random() < c.probe_decline_fraction:
                probes.append(offer)
                continue
            # Pieces of the same agent held from earlier offers are launched on together.
            group = self._take_held(offer.agent_id) + [offer]
            if not await self._launch_on(driver, group):
                self._hold(group[:-1])
                unused.append(offer)
        for offer in probes:
            self.recorder.declined(offer.agent_id)
        await self._decline(driver, probes, 0.0)
        if c.hold_offers:
            room = max(0, c.max_held - len(self.held))
            keep, unused = unused[:room], unused[room:]
            self._hold(keep)
        await self._decline(driver, unused, c.decline_refuse_seconds)
        if c.tell_demand:
            await self._tell_demand(driver)

    async def _tell_demand(self, driver) -> None:
        """The next task's shape while it wants more than the offers gave it; nothing once it
        runs all it wants (the driver sends it only when it changed)."""
        c = self.config
        try:
            await driver.demand(Resources.of(cpus=c.cpus, mem=c.mem) if self._room() else None)
        except SchedulerError as e:
            log.debug("demand not told", framework=c.name, error=str(e))

    def _take_held(self, agent_id: str) -> list[common_pb2.Offer]:
        return self.held.take_agent(agent_id)

    def _hold(self, offers: list[common_pb2.Offer]) -> None:
        now = time.monotonic()
        for offer in offers:
            self.held[offer.offer_id] = offer
            self._held_at.setdefault(offer.offer_id, now)

    async def _expire_held(self, driver) -> None:
        """Gives back what was held too long, so hoarded scraps do not inflate our share."""
        limit = self.config.max_hold_seconds
        assert limit is not None
        while True:
            await asyncio.sleep(limit / 2)
            now = time.monotonic()
            self._held_at = {i: t for i, t in self._held_at.items() if i in self.held}
            stale = [
                self.held.pop(i)
                for i, t in list(self._held_at.items())
                if now - t >= limit and i in self.held
            ]
            await self._decline(driver, stale, 0.0)

    async def _decline(self, driver, offers, refuse: float) -> None:
        if not offers:
            return
        try:
            await driver.decline(offers, refuse_seconds=refuse)
        except SchedulerError as e:
            log.debug("decline refused", framework=self.config.name, error=str(e))

    async def _launch_on_held(self, driver) -> None:
        """After a task ended: launch on what we hold, agent by agent, while there is demand."""
        for agent_id in self.held.agents():
            if not self._room():
                return
            group = self._take_held(agent_id)
            if group and not await self._launch_on(driver, group):
                self._hold(group)  # too small for now: more may free up on that agent

    async def _launch_on(self, driver, offers: list[common_pb2.Offer]) -> bool:
        """Launches as many tasks as demand, limits and these offers (one agent) allow;
        False if none fits (the offers are untouched)."""
        c = self.config
        if not self._room():
            return False  # no task to launch: do not even read the offers (10,000: 0.9 s)
        packer = OfferPacker(offers, role=c.role)
        taken: list[TraceTask | None] = []
        while self._room() and (c.tasks_per_offer <= 0 or len(taken) < c.tasks_per_offer):
            spec, item = self._next_spec()
            task = packer.pack(spec)
            if task is None:
                break
            taken.append(item)
            if item is not None:
                self.pending.popleft()
            self.running[task.task_id] = packer.agent_id
            self.launched += 1
        if not packer.tasks:
            return False
        task_ids = [t.task_id for t in packer.tasks]
        self.recorder.accepted(task_ids)
        try:
            await driver.launch(offers, packer.tasks, refuse_seconds=c.leftover_refuse_seconds)
        except SchedulerError as e:
            # E.g. rescinded meanwhile: undo, the tasks go out with a later offer.
            log.debug("launch refused", framework=c.name, error=str(e))
            for task_id in task_ids:
                self.running.pop(task_id, None)
            self.launched -= len(task_ids)
            for item in reversed(taken):
                if item is not None:
                    self.pending.appendleft(item)
        return True  # the offers are used (or gone) either way

    async def _feed_trace(self, driver) -> None:
        """Moves trace tasks into `pending` at their submit times; asks for offers again."""
        assert self.config.trace is not None and self.started_at is not None
        for item in self.config.trace:
            delay = self.started_at + item.submit_time - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.pending.append(item)
            if self.held:
                await self._launch_on_held(driver)
            elif not self.config.hold_offers and len(self.pending) == 1:
                try:
                    await driver.revive()  # our declines may have filtered every agent
                except SchedulerError as e:
                    log.debug("revive refused", error=str(e))

    @property
    def trace_done(self) -> bool:
        trace = self.config.trace
        return trace is None or (self.launched >= len(trace) and not self.running)

    def shares(self) -> dict[str, float]:
        return {"running": len(self.running), "held": len(self.held)}

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)


def tasks_for_rate(rate: float, mean_duration: float) -> int:
    """Running tasks that keep `rate` tasks/s ending when each lasts `mean_duration` s."""
    return max(1, math.ceil(rate * mean_duration))
