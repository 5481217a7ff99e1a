"""The gang of `agora experiment omega`: one job whose N tasks must all start at once.

With holds, the framework asks the master to collect resources for it as they free up
(`driver.hold(N, shape)`) and launches the gang when the held offers arrive (the HOLD event
says MET). Without holds it does what frameworks/batch does with a gang today: it looks at each
round of offers (one OFFERS event), launches only when that round fits all N tasks, declines
the round otherwise (a short filter), and revives when the filters run out so the next round
holds every free agent at once. On a cluster kept busy by small jobs such a round may never
come: the run then reports that the gang did not start within its timeout.

Before it is submitted and after it has launched the framework suppresses offers, so it takes
nothing from the small jobs but the gang itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from agora.experiments.load import DURATION_LABEL
from agora.experiments.omega_frameworks import Background
from agora.frameworks.sdk import Driver, Framework, SchedulerError, TaskSpec, fit, new_task_id
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)


@dataclass
class GangOutcome:
    """What became of the gang (times from the framework's clock)."""

    holds: bool
    tasks: int
    submitted: float | None = None
    launched: float | None = None  # its last task launched
    rounds: int = 0  # rounds of offers looked at after submission (without holds)
    best_round: int = 0  # the most of its tasks one round could fit
    hold_state: str = ""  # MET, EXPIRED, RELEASED (with holds)
    hold_message: str = ""
    error: str = ""

    @property
    def wait(self) -> float | None:
        if self.submitted is None or self.launched is None:
            return None
        return self.launched - self.submitted


class GangFramework(Framework):
    def __init__(
        self,
        tasks: int,
        cpus: float,
        mem: float,
        *,
        holds: bool,
        timeout_seconds: float,
        duration: float = 30.0,
        refuse_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpus, self.mem = cpus, mem
        self.timeout_seconds = timeout_seconds
        self.refuse_seconds = refuse_seconds
        self.clock = clock
        self.outcome = GangOutcome(holds=holds, tasks=tasks)
        self.specs = [
            TaskSpec(
                "gang",
                cpus=cpus,
                mem=mem,
                command=f"sleep {duration:g}",
                task_id=new_task_id("gang"),
                labels={DURATION_LABEL: f"{duration:g}"},
            )
            for _ in range(tasks)
        ]
        self.done = asyncio.Event()  # launched, or it never will be
        self.driver: Driver | None = None
        self._pool: dict[str, common_pb2.Offer] = {}  # with holds: offers since submission
        self._launching = False
        self._realign: asyncio.Task | None = None
        self._background = Background("gang")

    @property
    def waiting(self) -> bool:
        return self.outcome.submitted is not None and not self._launching

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        self.driver = driver
        if self.outcome.submitted is None:
            await self._quiet(driver.suppress())

    async def submit(self) -> None:
        driver = self.driver
        assert driver is not None, "submit after the framework subscribed"
        self.outcome.submitted = self.clock()
        if not self.outcome.holds:
            await self._quiet(driver.revive())
            return
        hold = getattr(driver, "hold", None)
        if hold is None:
            self._fail("this SDK has no driver.hold (holds are not available)")
            return
        try:
            await hold(
                count=len(self.specs),
                resources=f"cpus:{self.cpus:g};mem:{self.mem:g}",
                distinct_agents=False,
                timeout_seconds=self.timeout_seconds,
            )
        except SchedulerError as e:
            self._fail(f"hold refused: {e}")

    async def on_offers(self, driver: Driver, offers) -> None:
        offers = list(offers)
        if not self.waiting:
            await self._decline(driver, offers, 0.0)
        elif self.outcome.holds:
            # The held resources arrive in one OFFERS event just before the HOLD event.
            self._pool.update((o.offer_id, o) for o in offers)
        else:
            self._round(driver, offers)

    async def on_held_offers(self, driver: Driver, hold_id: str, offers) -> None:
        if self.waiting:
            self._pool.update((o.offer_id, o) for o in offers)
        else:
            await self._decline(driver, list(offers), 0.0)

    async def on_rescind(self, driver: Driver, offer_id: str) -> None:
        self._pool.pop(offer_id, None)

    async def on_hold(self, driver: Driver, hold_id: str, state: str, message: str) -> None:
        state = state.removeprefix("HOLD_")
        self.outcome.hold_state, self.outcome.hold_message = state, message
        if state != "MET":
            self._fail(f"hold {state.lower()}: {message}".rstrip(": "))
            return
        if not self.waiting:
            return
        offers, self._pool = list(self._pool.values()), {}
        plan = fit(offers, self.specs)
        if plan.unplaced:
            self._fail(f"the held offers fit {len(self.specs) - len(plan.unplaced)} tasks")
            await self._decline(driver, offers, 0.0)
            return
        self._launching = True
        self._background.spawn(self._launch(driver, plan))

    def _round(self, driver: Driver, offers: list[common_pb2.Offer]) -> None:
        self.outcome.rounds += 1
        plan = fit(offers, self.specs)
        placed = len(self.specs) - len(plan.unplaced)
        self.outcome.best_round = max(self.outcome.best_round, placed)
        if plan.unplaced:
            self._background.spawn(self._decline(driver, offers, self.refuse_seconds))
            if self._realign is None or self._realign.done():
                self._realign = self._background.spawn(self._revive_later(driver))
            return
        self._launching = True
        self._background.spawn(self._launch(driver, plan))

    async def _revive_later(self, driver: Driver) -> None:
        """Declined agents come back one by one as their filters expire, never together;
        reviving clears every filter at once, so the next round holds all that is free."""
        await asyncio.sleep(self.refuse_seconds)
        if self.waiting:
            await self._quiet(driver.revive())

    async def _launch(self, driver: Driver, plan) -> None:
        for placement in plan.placements:
            try:
                await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
            except SchedulerError as e:
                self._fail(f"a launch of the gang was refused: {e}")
                return
        self.outcome.launched = self.clock()
        await self._decline(driver, list(plan.unused), 0.0)
        await self._quiet(driver.suppress())
        self.done.set()

    def _fail(self, error: str) -> None:
        log.warning("gang did not launch", error=error)
        self.outcome.error = self.outcome.error or error
        self._launching = True  # no more rounds
        self.done.set()

    async def _decline(self, driver: Driver, offers, refuse: float) -> None:
        if offers:
            await self._quiet(driver.decline(offers, refuse_seconds=refuse))

    async def _quiet(self, call) -> None:
        try:
            await call
        except SchedulerError as e:
            log.debug("gang framework call refused", error=str(e))

    async def close(self) -> None:
        await self._background.close()
