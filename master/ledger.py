"""What the allocator is told about resources coming back and frameworks coming in.

The allocator holds, per agent, what each framework has been given (offers and tasks). Every
path that ends an offer or a task gives its resources back through `Ledger.recover`, which knows
when the allocator must not hear of them: an agent recovered from the store but not yet
re-registered is not in the allocator, and a framework that is gone has nothing there any more,
unless it is a torn-down framework whose tasks are still being killed (`reaping`).
"""

from __future__ import annotations

import structlog

from agora.common import EMPTY, Resources
from agora.master.allocator import AllocatorProtocol
from agora.master.clock import Clock
from agora.master.registry import RECOVERING, Agent, Framework, Offer, Registry, Task

log = structlog.get_logger(__name__)

__all__ = ["Ledger"]


class Ledger:
    def __init__(self, reg: Registry, allocator: AllocatorProtocol, clock: Clock) -> None:
        self.reg, self.allocator, self.clock = reg, allocator, clock
        # Torn-down frameworks whose tasks' processes have not ended yet: the allocator keeps
        # their resources in use until the agents report each task gone (FrameworkBook.teardown).
        self.reaping: set[str] = set()

    @staticmethod
    def in_allocator(agent: Agent | None) -> bool:
        return agent is not None and agent.state != RECOVERING

    def recover(
        self, framework_id: str, agent_id: str, resources: Resources, refuse: float | None = None
    ) -> None:
        """Gives `resources` of `framework_id` on `agent_id` back to the allocator, with a decline
        filter of `refuse` seconds when given: offers contained in `resources` stay hidden from
        the framework for that long (allocator/filters.py)."""
        if (
            resources
            and self.in_allocator(self.reg.agents.get(agent_id))
            and (framework_id in self.reg.frameworks or framework_id in self.reaping)
        ):
            try:
                self.allocator.recover(
                    framework_id, agent_id, resources, self.clock.now(), refuse_seconds=refuse
                )
            except ValueError:
                # The books disagree (a bug): log it loudly but keep serving everyone.
                log.exception(
                    "allocator refused to recover resources",
                    framework_id=framework_id,
                    agent_id=agent_id,
                    resources=str(resources),
                )

    def recover_task(self, task: Task) -> None:
        """A live task ended: what it used goes back (revocable resources were never an
        allocation: they only stop being in use)."""
        if task.info.revocable:
            if self.in_allocator(self.reg.agents.get(task.agent_id)):
                self.allocator.recover_revocable(task.framework_id, task.agent_id, task.resources)
            return
        self.recover(task.framework_id, task.agent_id, task.resources)

    def refuse_revocable(self, framework_id: str, agent_id: str, seconds: float) -> None:
        """A declined revocable offer: nothing more is lent to the framework there for that
        long (its ordinary offers are not filtered by it)."""
        if self.in_allocator(self.reg.agents.get(agent_id)) and framework_id in self.reg.frameworks:
            self.allocator.refuse_revocable(framework_id, agent_id, self.clock.now() + seconds)

    def release_offer(self, offer: Offer) -> None:
        """An offer ended unused (declined, rescinded, timed out): an exclusive one gives its
        resources back; an optimistic one held nothing and only stops counting as offered.
        A decline's filter is the caller's to install (refuse), once for all its offers."""
        if offer.revocable:
            if self.in_allocator(self.reg.agents.get(offer.agent_id)):
                self.allocator.withdraw_revocable(offer.framework_id, offer.agent_id)
            return
        if offer.exclusive:
            self.recover(offer.framework_id, offer.agent_id, offer.resources)
            return
        self.allocator.withdraw(offer.framework_id, offer.agent_id, offer.resources)

    def refuse(self, framework_id: str, agent_id: str, seconds: float, refused: Resources) -> None:
        """A decline filter: offers on `agent_id` contained in `refused` stay hidden from
        `framework_id` for `seconds` (nothing is given back here)."""
        if self.in_allocator(self.reg.agents.get(agent_id)) and framework_id in self.reg.frameworks:
            self.allocator.refuse(framework_id, agent_id, refused, self.clock.now(), seconds)

    def add_framework(self, framework: Framework) -> None:
        """Registers `framework` and tells the allocator, with what its known tasks use."""
        self.reg.frameworks[framework.framework_id] = framework
        allocated: dict[str, Resources] = {}
        lent: dict[str, Resources] = {}
        for task in self.reg.tasks_of_framework(framework.framework_id):
            if not self.in_allocator(self.reg.agents.get(task.agent_id)):
                continue
            if task.info.revocable:  # no allocation: booked apart (set, whichever comes first)
                lent[task.agent_id] = lent.get(task.agent_id, EMPTY) + task.resources
            else:
                allocated[task.agent_id] = allocated.get(task.agent_id, EMPTY) + task.resources
        self.allocator.add_framework(
            framework.framework_id,
            role=framework.role,
            capabilities=frozenset(framework.info.capabilities),
            allocated=allocated,
        )
        for agent_id, used in lent.items():
            self.allocator.set_revocable(framework.framework_id, agent_id, used)

    def forget_reaped(self) -> bool:
        """Forgets the torn-down frameworks whose last task is gone; True if any was (their
        resources are free: the caller wakes the offer cycle)."""
        done = [f for f in self.reaping if not self.reg.tasks_of_framework(f)]
        for framework_id in done:
            self.reaping.discard(framework_id)
            self.allocator.remove_framework(framework_id)
            log.info("torn-down framework's tasks all ended", framework_id=framework_id)
        return bool(done)
