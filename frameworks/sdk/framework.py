"""The Framework base class: override the callbacks you need; all are async and optional."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from agora.frameworks.sdk.tasks import describe_status
from agora.v1 import common_pb2

if TYPE_CHECKING:
    from agora.frameworks.sdk.driver import Driver

log = structlog.get_logger(__name__)


class Framework:
    """A scheduler's decisions. The driver calls these in the order the master sent the events,
    one at a time, so a callback never races another; keep them quick (await driver calls, do
    not block the event loop).

    Updates that carry a uuid are acknowledged for you after `on_update` returns (not if it
    raises: the agent then sends the update again). Set `implicit_acknowledgements = False` to
    acknowledge yourself with `driver.acknowledge(status)`, e.g. after persisting the state.
    """

    implicit_acknowledgements: bool = True

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        """Subscribed, or subscribed again after a reconnect (same framework_id)."""

    async def before_acknowledging(self, driver: Driver) -> None:
        """Called just before the driver acknowledges updates that `on_update` has handled
        (implicit acknowledgements go out in the background, several at a time). A framework
        that defers writing what its updates changed, to write a burst of them at once, makes
        it durable here. If this raises, those acknowledgements are not sent: the agents send
        the updates again, and they are acknowledged after a later call succeeds. It runs in
        the driver's acknowledging task, so it may come while a callback awaits a call."""

    async def on_offers(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        """Resources to launch tasks on. The default declines them all, so that a framework
        with nothing to run does not hold resources others could use."""
        await driver.decline(offers)

    async def on_update(self, driver: Driver, status: common_pb2.TaskStatus) -> None:
        """A task changed state (or a reconciliation answer)."""
        log.info("task status", status=describe_status(status))

    async def on_rescind(self, driver: Driver, offer_id: str) -> None:
        """An offer is no longer valid (its agent went away, or the master took it back)."""

    async def on_held_offers(
        self, driver: Driver, hold_id: str, offers: Sequence[common_pb2.Offer]
    ) -> None:
        """A hold (driver.hold) was met: `offers` are everything it collected, in one go, and no
        other framework can take them. The default hands them to on_offers; override to use
        them for the job that asked (on_hold follows with state "MET")."""
        await self.on_offers(driver, offers)

    async def on_hold(self, driver: Driver, hold_id: str, state: str, message: str) -> None:
        """A hold (driver.hold) ended: state "MET" (its offers came just before, through
        on_offers), "EXPIRED" or "RELEASED"."""
        log.info("hold ended", hold_id=hold_id, state=state, message=message)

    async def on_agent_lost(self, driver: Driver, agent_id: str) -> None:
        """An agent was removed; its tasks arrive separately as TASK_LOST updates."""

    async def on_preemption(
        self, driver: Driver, task_id: str, agent_id: str, message: str, deadline: float
    ) -> None:
        """One of this framework's tasks is being stopped for another role (the master's
        preemption): it gets SIGTERM now and ends TASK_KILLED with reason REASON_PREEMPTED by
        `deadline` (Unix seconds). `message` says who needed what."""
        log.info("task preempted", task_id=task_id, agent_id=agent_id, message=message)

    async def on_agent_drain(
        self, driver: Driver, agent_id: str, draining: bool, deadline: float
    ) -> None:
        """An operator drained an agent where this framework has tasks (`draining`; False: the
        drain ended). Nothing more of it is offered; its tasks run on until `deadline` (Unix
        seconds; 0: none), when the master kills what is left, TASK_KILLED with reason
        REASON_AGENT_DRAINED. Start replacements elsewhere before then if they matter. Also
        called again after every (re)subscription while the drain lasts."""

    async def on_error(self, driver: Driver, message: str) -> None:
        """The master ended the subscription for good (removed, or failed over to another
        scheduler). The driver stops after this returns and `run` raises SubscriptionEnded.
        The driver has logged it already (a refusal by the ACLs once, however often retried)."""
        log.debug("master ended the subscription", message=message)

    async def on_disconnected(self, driver: Driver) -> None:
        """The stream to the master broke; the driver is reconnecting. Offers in hand are void."""
