"""Preemption in the master: when a starved role has tasks of others stopped for it.

Off unless the operator sets a timeout (--guarantee-preemption-timeout, --fair-share-preemption-
timeout). On each check turn of the master's tick (MasterCore.tick) `Preemptions.check` takes the
allocator's snapshot, the frameworks' unmet demand (their Demand calls) and the running tasks,
asks the pure `allocator.preemption.plan` what to stop, and sends those kills. A role has demand
while one of its frameworks says what it waits to place, is subscribed, is not suppressed, and
holds no offer it has not answered (it might place the task there). A kill goes out once: its
task is "in flight" until it ends, its role gives nothing more meanwhile, and the beneficiary
waits for what was freed for it. At most --max-preemptions-per-minute tasks are stopped a minute.
The task ends TASK_KILLED with reason REASON_PREEMPTED and a message naming who needed what.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import structlog

from agora.common.task_states import REASON_PREEMPTED, is_terminal
from agora.master.allocator import AllocatorProtocol
from agora.master.allocator.drf import inverse_totals, scalar_vector, vector_resources
from agora.master.allocator.preemption import (
    GUARANTEE,
    PRIORITY,
    Candidate,
    RoleState,
    fair_shares,
    plan,
    starvation,
)
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.registry import Registry
from agora.master.registry_store import RegistryStore
from agora.v1 import common_pb2, operator_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["Preempted", "Preemptions"]

Event = scheduler_pb2.Event
# What a task that names no kill grace period gets from its agent (TaskInfo's default).
DEFAULT_GRACE_SECONDS = 3.0
# Preemptions remembered for `agora cluster preemptions` (the newest).
HISTORY = 200
# The reason of a task stopped because an ordinary launch needed its revocable resources.
REVOCABLE = "revocable"


@dataclass
class Preempted:
    """One task stopped for another role, for people (and kept in the registry)."""

    at: float  # wall clock
    framework_id: str
    task_id: str
    role: str
    agent_id: str
    beneficiary: str
    reason: str
    message: str
    ended_at: float = 0.0  # wall clock, once the victim was seen ending (0: not yet)

    def summary(self) -> operator_pb2.PreemptionSummary:
        """As the Operator API and the registry keep it (the same fields)."""
        return operator_pb2.PreemptionSummary(**asdict(self))

    @classmethod
    def of(cls, summary: operator_pb2.PreemptionSummary) -> Preempted:
        return cls(**{f.name: getattr(summary, f.name) for f in fields(cls)})


@dataclass
class _FreedForPriority:
    """Room a priority preemption freed on an agent for its own role's demand."""

    agent_id: str
    demand: tuple  # the demand it was freed for (_demand_key)
    before: set[tuple[str, str]]  # the role's tasks on the agent then


def _demand_key(demand: tuple[dict, int] | None) -> tuple | None:
    if demand is None:
        return None
    shape, priority = demand
    return priority, tuple(sorted(shape.items()))


class Preemptions:
    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        allocator: AllocatorProtocol,
        clock: Clock,
        wall: Callable[[], float] = time.time,
        store: RegistryStore | None = None,
    ) -> None:
        self.config, self.reg, self.allocator, self.clock, self.wall = (
            config,
            reg,
            allocator,
            clock,
            wall,
        )
        self.enabled = (
            config.guarantee_preemption_timeout_seconds is not None
            or config.fair_share_preemption_timeout_seconds is not None
            or bool(config.role_preemption_timeouts)
        )
        self._starved_since: dict[str, float] = {}
        self._waiting_since: dict[str, float] = {}  # roles with demand, starved or not
        # Kills sent whose tasks have not ended: (framework_id, task_id) -> beneficiary role.
        self._in_flight: dict[tuple[str, str], str] = {}
        self._sent: deque[float] = deque()  # clock times of the last minute's kills
        self._revoked: set[tuple[str, str]] = set()  # revocations sent, not yet seen ended
        # The newest HISTORY preemptions, kept in the registry too (a new leader reads them):
        # `agora cluster preemptions` and reconciliation tell them after a failover.
        self.store = store
        self.history: deque[Preempted] = deque(maxlen=HISTORY)
        self._by_task: dict[tuple[str, str], Preempted] = {}
        for summary in (store.preemptions() if store is not None else [])[-HISTORY:]:
            self._remember(Preempted.of(summary))
        # Why each starved role is owed resources (GUARANTEE or FAIR_SHARE), for "why no offers".
        self._why: dict[str, str] = {}
        # Priority within a role works only if the framework places by priority: room freed for
        # a demand is watched until the role launches there, and if it launched only tasks of
        # a lower priority than that demand, the role preempts no more for priority until its
        # demand changes (else each kill would be followed by the same launch: a loop).
        self._freed_for_priority: dict[str, _FreedForPriority] = {}
        self._priority_off: dict[str, tuple] = {}  # role -> the demand it is off for
        # Called with each task stopped (the master counts them in its metrics).
        self.on_preempted: Callable[[Preempted], None] = lambda preempted: None

    def check(self) -> list[Preempted]:
        """Stops what the plan says, now; returns what it stopped."""
        if self._revoked:  # revocations happen with preemption off too
            self._forget_ended()
        if not self.enabled:
            return []
        now = self.clock.now()
        self._forget_ended()
        while self._sent and now - self._sent[0] >= 60.0:
            self._sent.popleft()
        budget = self.config.max_preemptions_per_minute - len(self._sent)
        role_inputs, total = self.allocator.preemption_roles()
        # Roles with kills under way: the beneficiary waits for what is being freed, the
        # victims' roles give nothing more until those tasks have ended.
        busy = set(self._in_flight.values()) | {self._role_of(fid) for fid, _ in self._in_flight}
        # Starvation is timed on what the roles wait for; an offer in hand only defers a
        # preemption (the framework may place its task there), it does not restart the clock.
        waited, placeable = self._demands()
        self._watch_priority_room(waited, busy)
        waiting = {
            name: RoleState(name, weight, allocated, guarantee, waited.get(name, (None, 0))[0])
            for name, (weight, guarantee, allocated) in role_inputs.items()
        }
        self._track_starvation(waiting, total, busy, now)
        roles = {}
        for name, r in waiting.items():
            wants, priority = placeable.get(name, (None, 0))
            roles[name] = RoleState(
                r.role, r.weight, r.allocated, r.guarantee, None if name in busy else wants,
                self._starved_since.get(name), priority,
                None if name in self._priority_off else self._waiting_since.get(name),
                self.config.role_preemption_timeouts.get(name),
            )  # fmt: skip
        if budget <= 0 or not any(self._may_be_due(r, now) for r in roles.values()):
            return []  # the common case: nothing below the line long enough to look further
        # What each role with demand could be offered where: room reserved for another role,
        # or kept for another's guarantee, is no room for it (even lent out, as it may be).
        wanting = [name for name, r in roles.items() if r.wants is not None]
        made = plan(
            roles,
            total,
            self.allocator.preemption_free(),
            self._candidates(busy, now),
            now,
            self._timeout(self.config.guarantee_preemption_timeout_seconds),
            self._timeout(self.config.fair_share_preemption_timeout_seconds),
            max_victims=budget,
            usable=self.allocator.preemption_room(wanting),
        )
        stopped = []
        for preemption in made:
            wanted = roles[preemption.beneficiary].wants or {}
            if preemption.reason == PRIORITY:
                role = preemption.beneficiary
                demand = _demand_key((wanted, roles[role].wants_priority))
                assert demand is not None
                self._freed_for_priority[role] = _FreedForPriority(
                    preemption.agent_id,
                    demand,
                    {
                        t.key
                        for t in self.reg.tasks_of_agent(preemption.agent_id)
                        if self._role_of(t.framework_id) == role
                    },
                )
            for victim in preemption.victims:
                message = (
                    f"preempted: role {preemption.beneficiary} needs "
                    f"{vector_resources(wanted)} ({preemption.reason})"
                )
                if self._kill(victim, message):
                    self._in_flight[(victim.framework_id, victim.task_id)] = preemption.beneficiary
                    self._sent.append(now)
                    entry = Preempted(
                        self.wall(),
                        victim.framework_id,
                        victim.task_id,
                        victim.role,
                        victim.agent_id,
                        preemption.beneficiary,
                        preemption.reason,
                        message,
                    )
                    self._remember(entry, store=True)
                    self.on_preempted(entry)
                    stopped.append(entry)
            log.info(
                "preempting tasks",
                beneficiary=preemption.beneficiary,
                reason=preemption.reason,
                agent_id=preemption.agent_id,
                tasks=[v.task_id for v in preemption.victims],
            )
        return stopped

    @staticmethod
    def _timeout(seconds: float | None) -> float:
        return seconds if seconds is not None else float("inf")

    def _role_of(self, framework_id: str) -> str:
        framework = self.reg.frameworks.get(framework_id)
        return framework.role if framework is not None else ""

    def _may_be_due(self, role: RoleState, now: float) -> bool:
        """Whether the role might preempt now (plan decides): it wants something and has
        waited, starved or for its priority, at least the shortest timeout that applies."""
        if role.wants is None:
            return False
        timeouts = [
            t
            for t in (
                role.timeout,
                self.config.guarantee_preemption_timeout_seconds,
                self.config.fair_share_preemption_timeout_seconds,
            )
            if t is not None
        ]
        if not timeouts:
            return False  # preemption is on for other roles only
        shortest = min(timeouts)
        since = [s for s in (role.starved_since, role.waiting_since) if s is not None]
        return bool(since) and now - min(since) >= shortest

    def _watch_priority_room(self, waited: dict[str, tuple[dict, int]], busy: set[str]) -> None:
        """Turns priority preemption off for a role that put tasks of a lower priority than
        its demand in the room freed for that demand (its framework does not place by
        priority), and on again once its demand changes."""
        for role, demand in list(self._priority_off.items()):
            if _demand_key(waited.get(role)) != demand:
                del self._priority_off[role]
        for role, freed in list(self._freed_for_priority.items()):
            if _demand_key(waited.get(role)) != freed.demand:
                del self._freed_for_priority[role]  # met, or another demand now
                continue
            if role in busy:
                continue  # its victims have not ended yet
            launched = [
                t
                for t in self.reg.tasks_of_agent(freed.agent_id)
                if t.key not in freed.before
                and self._role_of(t.framework_id) == role
                and not is_terminal(t.state)
            ]
            if not launched:
                continue  # not used yet
            del self._freed_for_priority[role]
            priority = freed.demand[0]
            if all(t.info.priority < priority for t in launched):
                self._priority_off[role] = freed.demand
                log.warning(
                    "a role placed lower-priority tasks where room was freed for its "
                    "higher-priority demand: no more preemption for its priority until the "
                    "demand changes",
                    role=role,
                    agent_id=freed.agent_id,
                    priority=priority,
                    tasks=[t.task_id for t in launched],
                )

    def _demands(self) -> tuple[dict[str, tuple[dict, int]], dict[str, tuple[dict, int]]]:
        """Per role, the unmet task (the highest priority, the smallest of those) and its
        priority: of its subscribed, unsuppressed frameworks, and of those of them that hold
        no offer they have not answered (they might place it there)."""
        every: dict[str, list] = {}
        without_offers: dict[str, list] = {}
        for framework in self.reg.frameworks.values():
            if framework.unmet is None or not framework.connected or framework.suppressed:
                continue
            entry = (-framework.unmet_priority, scalar_vector(framework.unmet))
            every.setdefault(framework.role, []).append(entry)
            if not self.reg.offers_of_framework(framework.framework_id):
                without_offers.setdefault(framework.role, []).append(entry)

        def first(entries: list) -> tuple[dict, int]:
            priority, shape = min(entries, key=lambda s: (s[0], sorted(s[1].items())))
            return shape, -priority

        return (
            {role: first(e) for role, e in every.items()},
            {role: first(e) for role, e in without_offers.items()},
        )

    def _track_starvation(
        self, roles: dict[str, RoleState], total: dict, busy: set[str], now: float
    ) -> None:
        """Since when each role has been starved; a busy role keeps its time (its demand is
        being met), so its next task does not wait a whole timeout again."""
        inverse, fair = inverse_totals(total), fair_shares(roles.values())
        for name, role in roles.items():
            if role.wants is None:
                self._waiting_since.pop(name, None)
            else:
                self._waiting_since.setdefault(name, now)
            if name in busy and name in self._starved_since:
                continue
            why = starvation(role, fair.get(name, 0.0), inverse)
            if why is None:
                self._starved_since.pop(name, None)
                self._why.pop(name, None)
            else:
                self._starved_since.setdefault(name, now)
                self._why[name] = why

    def explain(self, role: str) -> str | None:
        """Why the role waits, if it is starved and preemption is on: since when, for what,
        and when its timeout passes (for "why no offers")."""
        since, why = self._starved_since.get(role), self._why.get(role)
        off = self._priority_off.get(role)
        if self.enabled and off is not None and (since is None or why is None):
            return (
                f"role {role}'s framework placed lower-priority tasks where a task was "
                f"preempted for its priority-{off[0]} demand: nothing more is preempted for that "
                "demand until it changes (place tasks by priority, e.g. agora batch --queue "
                "priority)"
            )
        if not self.enabled or since is None or why is None:
            return None
        timeout = self.config.role_preemption_timeouts.get(role) or (
            self.config.guarantee_preemption_timeout_seconds
            if why == GUARANTEE
            else self.config.fair_share_preemption_timeout_seconds
        )
        waited = self.clock.now() - since
        owed = "its quota guarantee" if why == GUARANTEE else "its fair share"
        if timeout is None:
            return (
                f"role {role} has waited {waited:.0f} s below {owed} with work it cannot "
                f"place; preemption for it is off (--{why.replace(' ', '-')}-preemption-timeout)"
            )
        if waited < timeout:
            return (
                f"role {role} has waited {waited:.0f} s below {owed} with work it cannot "
                f"place: in {timeout - waited:.0f} s (its preemption timeout, {timeout:g} s) "
                "tasks of roles above their share are stopped for it"
            )
        return (
            f"role {role} is below {owed} with work it cannot place, past its preemption "
            f"timeout ({timeout:g} s): tasks of roles above their share are being stopped for it"
        )

    def _candidates(self, busy: set[str], now: float) -> list[Candidate]:
        """The running tasks of roles with no kills under way, with their start time on the
        master's clock (their latest update's wall-clock stamp, moved over)."""
        to_clock = now - self.wall()
        out = []
        for task in self.reg.tasks.values():
            if is_terminal(task.state) or task.key in self._in_flight:
                continue
            if task.info.revocable:
                # Never a victim here, yet always the first to go: its room is free in the
                # books, so a starved role that may be offered it counts it as room (plan's
                # `usable`), is offered it, and its launch there stops the lent tasks at once
                # (TaskBook.revoke_for) before anyone's allocation is touched. Lent room the
                # role may not be offered (another's reservation or guarantee) would not help.
                continue
            role = self._role_of(task.framework_id)
            if not role or role in busy:
                continue
            stamp = task.last_status.timestamp if task.last_status is not None else 0.0
            started = stamp + to_clock if stamp else now
            out.append(
                Candidate(
                    task.framework_id,
                    task.task_id,
                    role,
                    task.agent_id,
                    scalar_vector(task.resources),
                    priority=task.info.priority,
                    started_at=started,
                )
            )
        return out

    def _kill(self, victim: Candidate, message: str) -> bool:
        """Sends the kill, and the framework a notice first (when the task will be gone)."""
        agent = self.reg.agents.get(victim.agent_id)
        if agent is None or not agent.connected:
            return False
        task = self.reg.tasks.get((victim.framework_id, victim.task_id))
        grace = task.info.kill_grace_period_seconds if task is not None else 0.0
        grace = min(grace or DEFAULT_GRACE_SECONDS, self.config.max_kill_grace_seconds)
        framework = self.reg.frameworks.get(victim.framework_id)
        if framework is not None:
            notice = Event.PreemptionNotice(
                task_id=victim.task_id,
                agent_id=victim.agent_id,
                message=message,
                deadline=self.wall() + grace,
            )
            framework.send(Event(preemption=notice))
        return agent.kill(victim.framework_id, victim.task_id, reason=REASON_PREEMPTED, why=message)

    def _forget_ended(self) -> None:
        ended_keys = [k for k in self._in_flight if k not in self.reg.tasks]
        ended_keys += [k for k in self._revoked if k not in self.reg.tasks]
        for key in ended_keys:
            self._in_flight.pop(key, None)
            self._revoked.discard(key)
            ended = self.reg.completed.get(key)
            entry = self._by_task.get(key)
            if entry is not None and ended is not None and ended.state == common_pb2.TASK_KILLED:
                entry.ended_at = self.wall()
                if self.store is not None:
                    self.store.put_preemption(entry.summary())

    def revoke(self, task, beneficiary: str, message: str) -> bool:
        """Stops a task on revocable resources that an ordinary launch of `beneficiary`'s needs
        (TaskBook.revoke_for): a notice, the kill, and a record as any preemption's, with the
        reason "revocable". Not bounded by --max-preemptions-per-minute: the resources were
        only lent."""
        victim = Candidate(
            task.framework_id,
            task.task_id,
            self._role_of(task.framework_id),
            task.agent_id,
            scalar_vector(task.resources),
            revocable=True,
        )
        if not self._kill(victim, message):
            return False
        self._revoked.add(task.key)  # its end is noted with the record (_forget_ended)
        entry = Preempted(
            self.wall(),
            task.framework_id,
            task.task_id,
            victim.role,
            task.agent_id,
            beneficiary,
            REVOCABLE,
            message,
        )
        self._remember(entry, store=True)
        self.on_preempted(entry)
        log.info("revoking a task", task_id=task.task_id, beneficiary=beneficiary)
        return True

    def _remember(self, entry: Preempted, store: bool = False) -> None:
        """Adds to the history (and the registry, with `store`), the oldest dropped past it."""
        if len(self.history) == HISTORY:
            oldest = self.history[0]
            self._by_task.pop((oldest.framework_id, oldest.task_id), None)
            if store and self.store is not None:
                self.store.forget_preemptions([(oldest.framework_id, oldest.task_id)])
        self.history.append(entry)
        self._by_task[(entry.framework_id, entry.task_id)] = entry
        if store and self.store is not None:
            self.store.put_preemption(entry.summary())

    def ended(self, framework_id: str, task_id: str) -> Preempted | None:
        """The preemption that ended this task, once its end was seen (for reconciliation)."""
        entry = self._by_task.get((framework_id, task_id))
        return entry if entry is not None and entry.ended_at else None
