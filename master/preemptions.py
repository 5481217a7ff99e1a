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
# A framework whose room freed for its priority is taken by its lower-priority work again and
# again pauses priority preemption for twice the fair-share timeout, then twice as long at each
# repeat, up to this (or twice the timeout, if longer): a steady job is served again in the end.
PRIORITY_PAUSE_MAX = 600.0


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
    """Room a priority preemption freed on an agent for one framework's demand."""

    agent_id: str
    role: str
    demand: tuple  # the framework's demand it was freed for (_demand_key)
    victims: frozenset[tuple[str, str]]
    # The framework's tasks on the agent placed before the victims ended (in other room).
    before: set[tuple[str, str]]


@dataclass
class _PriorityPause:
    """Priority preemption paused for a framework's demand (its freed room fed lower work)."""

    role: str
    demand: tuple  # _demand_key
    until: float  # the master's clock


def _demand_key(shape: dict, priority: int) -> tuple:
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
        # a framework's demand is watched, once the victims have ended, until that framework
        # launches there; if it launched only tasks of a lower priority than that demand, its
        # priority preemption pauses until the demand changes or the pause ends (else each kill
        # would be followed by the same launch: a loop). Keyed by framework id.
        self._freed_for_priority: dict[str, _FreedForPriority] = {}
        self._priority_paused: dict[str, _PriorityPause] = {}
        self._priority_strikes: dict[str, int] = {}  # loops in a row: the pause doubles
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
        self._watch_priority_room(now)
        waiting = {
            name: RoleState(name, weight, allocated, guarantee,
                            waited[name][0] if name in waited else None, limit=limit)
            for name, (weight, guarantee, allocated, limit) in role_inputs.items()
        }  # fmt: skip
        self._track_starvation(waiting, total, busy, now)
        roles = {}
        for name, r in waiting.items():
            wants, priority, by = placeable.get(name, (None, 0, ""))
            roles[name] = RoleState(
                r.role, r.weight, r.allocated, r.guarantee, None if name in busy else wants,
                self._starved_since.get(name), priority,
                None if by in self._priority_paused else self._waiting_since.get(name),
                self.config.role_preemption_timeouts.get(name), r.limit,
            )  # fmt: skip
        due = [name for name, r in roles.items() if self._may_be_due(r, now)]
        if budget <= 0 or not due:
            return []  # the common case: nothing below the line long enough to look further
        # What each role that may preempt could be offered where: room reserved for another
        # role, or kept for another's guarantee, is no room for it (even lent out, as it may
        # be). Only those roles: `plan` reads no other's room.
        made = plan(
            roles,
            total,
            self.allocator.preemption_free(),
            self._candidates(busy, now),
            now,
            self._timeout(self.config.guarantee_preemption_timeout_seconds),
            self._timeout(self.config.fair_share_preemption_timeout_seconds),
            max_victims=budget,
            usable=self.allocator.preemption_room(due),
        )
        stopped = []
        for preemption in made:
            wanted = roles[preemption.beneficiary].wants or {}
            if preemption.reason == PRIORITY:
                role = preemption.beneficiary
                by = placeable[role][2]  # the framework whose demand it is
                victims = frozenset((v.framework_id, v.task_id) for v in preemption.victims)
                self._freed_for_priority[by] = _FreedForPriority(
                    preemption.agent_id,
                    role,
                    _demand_key(wanted, roles[role].wants_priority),
                    victims,
                    {
                        t.key
                        for t in self.reg.tasks_of_agent(preemption.agent_id)
                        if t.framework_id == by and t.key not in victims
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
        waited starved at least the shortest timeout that applies, or waited the fair-share
        timeout with tasks of its own of a lower priority than its demand (the only ones its
        priority may stop: without them a steady demand would cost a plan every turn)."""
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
        if role.starved_since is not None and now - role.starved_since >= min(timeouts):
            return True
        priority_timeout = self.config.fair_share_preemption_timeout_seconds
        return (
            role.waiting_since is not None
            and priority_timeout is not None
            and now - role.waiting_since >= priority_timeout
            and self._has_lower_priority_tasks(role.role, role.wants_priority)
        )

    def _has_lower_priority_tasks(self, role: str, priority: int) -> bool:
        for framework in self.reg.frameworks.values():
            if framework.role != role:
                continue
            for task in self.reg.tasks_of_framework(framework.framework_id):
                if task.info.priority < priority and not task.info.revocable:
                    if not is_terminal(task.state):
                        return True
        return False

    def _watch_priority_room(self, now: float) -> None:
        """Pauses priority preemption for a framework that put tasks of a lower priority than
        its demand in the room freed for that demand (it does not place by priority), for
        twice the fair-share timeout, doubled at each repeat (PRIORITY_PAUSE_MAX); ends the
        pause when it is over or the demand changes.

        Only the framework's own ordinary tasks launched there after the victims ended count:
        what it placed in other room while they were in their kill grace was not put in theirs.
        (The watch reads the books on each check turn, so a launch within the turn in which the
        last victim ended counts as after.)"""
        for fid, pause in list(self._priority_paused.items()):
            if now >= pause.until or self._framework_demand(fid) != pause.demand:
                del self._priority_paused[fid]
        for fid in [f for f in self._priority_strikes if self._framework_demand(f) is None]:
            del self._priority_strikes[fid]  # nothing waits: its next demand starts afresh
        for fid, freed in list(self._freed_for_priority.items()):
            if self._framework_demand(fid) != freed.demand:
                del self._freed_for_priority[fid]  # met, or another demand now
                continue
            mine = [
                t
                for t in self.reg.tasks_of_agent(freed.agent_id)
                if t.framework_id == fid and not t.info.revocable and not is_terminal(t.state)
            ]
            if any(key in self.reg.tasks for key in freed.victims):
                freed.before.update(t.key for t in mine)  # the victims' room is not free yet
                continue
            launched = [t for t in mine if t.key not in freed.before]
            if not launched:
                continue  # not used yet
            del self._freed_for_priority[fid]
            priority = freed.demand[0]
            if not all(t.info.priority < priority for t in launched):
                self._priority_strikes.pop(fid, None)  # the room served the demand
                continue
            strikes = self._priority_strikes[fid] = self._priority_strikes.get(fid, 0) + 1
            seconds = self._pause_seconds(strikes)
            self._priority_paused[fid] = _PriorityPause(freed.role, freed.demand, now + seconds)
            log.warning(
                "a framework placed lower-priority tasks where room was freed for its "
                "higher-priority demand: its priority preemption pauses",
                role=freed.role,
                framework_id=fid,
                agent_id=freed.agent_id,
                priority=priority,
                pause_seconds=seconds,
                tasks=[t.task_id for t in launched],
            )

    def _pause_seconds(self, strikes: int) -> float:
        """How long priority preemption pauses after the `strikes`-th loop in a row: twice the
        fair-share timeout (the wait it cut short), doubled at each repeat, capped."""
        base = max(self.config.fair_share_preemption_timeout_seconds or 0.0, 1.0)
        return min(base * 2.0**strikes, max(PRIORITY_PAUSE_MAX, 2.0 * base))

    def _framework_demand(self, framework_id: str) -> tuple | None:
        """The framework's demand as it counts (subscribed, not suppressed), keyed."""
        framework = self.reg.frameworks.get(framework_id)
        if framework is None or framework.unmet is None or not framework.connected:
            return None
        if framework.suppressed:
            return None
        return _demand_key(scalar_vector(framework.unmet), framework.unmet_priority)

    def _demands(
        self,
    ) -> tuple[dict[str, tuple[dict, int, str]], dict[str, tuple[dict, int, str]]]:
        """Per role, the unmet task (the highest priority, the smallest of those), its priority
        and the framework that waits to place it: of its subscribed, unsuppressed frameworks,
        and of those of them that hold no offer they have not answered (they might place it
        there)."""
        every: dict[str, list] = {}
        without_offers: dict[str, list] = {}
        for framework in self.reg.frameworks.values():
            if framework.unmet is None or not framework.connected or framework.suppressed:
                continue
            entry = (-framework.unmet_priority, scalar_vector(framework.unmet),
                     framework.framework_id)  # fmt: skip
            every.setdefault(framework.role, []).append(entry)
            if not self.reg.offers_of_framework(framework.framework_id):
                without_offers.setdefault(framework.role, []).append(entry)

        def first(entries: list) -> tuple[dict, int, str]:
            priority, shape, by = min(entries, key=lambda s: (s[0], sorted(s[1].items()), s[2]))
            return shape, -priority, by

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
        now = self.clock.now()
        paused = [
            (fid, p) for fid, p in self._priority_paused.items() if p.role == role and now < p.until
        ]
        if self.enabled and paused and (since is None or why is None):
            fid, pause = paused[0]
            framework = self.reg.frameworks.get(fid)
            name = (framework.info.name if framework is not None else "") or fid
            return (
                f"role {role}'s framework {name} placed lower-priority tasks where a task was "
                f"preempted for its priority-{pause.demand[0]} demand: nothing more is preempted "
                f"for that demand for {pause.until - now:.0f} s, or until it changes (the pause "
                "doubles each time this happens again; place tasks by priority, e.g. agora "
                "batch --queue priority)"
            )
        if not self.enabled or since is None or why is None:
            return None
        timeout = self.config.role_preemption_timeouts.get(role) or (
            self.config.guarantee_preemption_timeout_seconds
            if why == GUARANTEE
            else self.config.fair_share_preemption_timeout_seconds
        )
        waited = now - since
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
