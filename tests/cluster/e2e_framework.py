"""A framework for end-to-end tests: launches what it is told, records everything it hears."""

from __future__ import annotations

import asyncio
import contextlib

from harness import eventually_async

from agora.frameworks.sdk import Framework, TaskSpec, fit, run_async
from agora.v1 import common_pb2


class Recorder(Framework):
    """Holds on to offers (never declines), launches queued specs into them, logs every event."""

    def __init__(self) -> None:
        self.driver = None
        self.framework_ids: list[str] = []  # one per SUBSCRIBED: a failover repeats the id
        self.offers: dict[str, common_pb2.Offer] = {}
        self.rescinded: list[str] = []
        self.lost_agents: list[str] = []
        self.updates: list[common_pb2.TaskStatus] = []
        self.queue: list[tuple[TaskSpec, str | None]] = []  # (spec, wanted agent id or None)
        self.launched: dict[str, str] = {}  # task id -> agent id

    # --- callbacks -------------------------------------------------------------------------

    async def on_subscribed(self, driver, framework_id):
        self.driver = driver
        self.framework_ids.append(framework_id)
        # Offers belong to a subscription: after a reconnect (say, to a new leader) the old ones
        # are void, and the master offers afresh.
        self.offers.clear()

    async def on_offers(self, driver, offers):
        for offer in offers:
            self.offers[offer.offer_id] = offer
        await self._launch_queued(driver)

    async def on_rescind(self, driver, offer_id):
        self.rescinded.append(offer_id)
        self.offers.pop(offer_id, None)

    async def on_update(self, driver, status):
        self.updates.append(status)

    async def on_agent_lost(self, driver, agent_id):
        self.lost_agents.append(agent_id)

    # --- test-facing helpers ----------------------------------------------------------------

    async def launch(self, spec: TaskSpec, agent_id: str | None = None) -> None:
        """Launches `spec` (on `agent_id` if given) as soon as an offer fits it."""
        self.queue.append((spec, agent_id))
        if self.driver is not None:
            await self._launch_queued(self.driver)
        await eventually_async(
            lambda: spec.task_id in self.launched, timeout=30, message=f"{spec.task_id} launched"
        )

    async def _launch_queued(self, driver) -> None:
        for spec, agent_id in list(self.queue):
            offers = [o for o in self.offers.values() if agent_id in (None, o.agent_id)]
            result = fit(offers, [spec])
            if not result.placements:
                continue
            placement = result.placements[0]
            for offer in placement.offers:
                self.offers.pop(offer.offer_id, None)
            self.queue.remove((spec, agent_id))
            await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
            self.launched[spec.task_id] = placement.agent_id

    def states(self, task_id: str) -> list[str]:
        return [common_pb2.TaskState.Name(u.state) for u in self.updates if u.task_id == task_id]

    def last(self, task_id: str) -> common_pb2.TaskStatus | None:
        matching = [u for u in self.updates if u.task_id == task_id]
        return matching[-1] if matching else None

    async def wait_state(self, task_id: str, state: str, timeout: float = 30.0):
        await eventually_async(
            lambda: state in self.states(task_id),
            timeout=timeout,
            message=f"{task_id} {state} (saw {self.states(task_id)})",
        )
        return next(
            u
            for u in self.updates
            if u.task_id == task_id and common_pb2.TaskState.Name(u.state) == state
        )

    async def wait_offer_from(self, agent_id: str, timeout: float = 30.0) -> common_pb2.Offer:
        return await eventually_async(
            lambda: next((o for o in self.offers.values() if o.agent_id == agent_id), None),
            timeout=timeout,
            message=f"an offer from {agent_id}",
        )


@contextlib.asynccontextmanager
async def running(framework: Recorder, master: str, name: str = "e2e", **kwargs):
    """Runs `framework` in the background for the duration of the block."""
    task = asyncio.create_task(run_async(framework, master=master, name=name, **kwargs))
    try:
        await eventually_async(
            lambda: framework.framework_ids or task.done(), timeout=30, message="subscription"
        )
        if task.done():
            task.result()
        yield framework
    finally:
        if framework.driver is not None:
            framework.driver.stop()
        try:
            await asyncio.wait_for(task, 10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
