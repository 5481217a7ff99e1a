"""Preemption, decided: which running tasks to stop so a starved role gets what it needs. Pure.

The master (master/preemptions.py) calls `plan` with a snapshot of the allocator (each role's
weight, guarantee, allocation and the shape of the next task it could not place; free resources
per agent; the running tasks that could be stopped) and carries out what it returns. Nothing
here reads a clock or the registry: the caller says since when each role has been starved.

A role is **starved** while it has demand that nothing free can hold, and either its allocation
does not cover its quota guarantee (reason "guarantee"), or its weighted dominant share is below
its fair share (reason "fair share"): weight / the sum of the weights of the roles that hold or
want resources, as YARN's fair scheduler computes it for DRF. Once starved for longer than the
reason's timeout, it may preempt.

**Victims** are found on one agent, the one where the fewest tasks (then the least work done)
free room for the starved role's next task: revocable tasks first, then the lowest priority,
then the youngest. Two rules keep roles from taking resources back and forth (thrashing):

- a task is a victim only if its role keeps at least its fair share and its guarantee without
  it (with every victim taken before it in the same plan);
- a role preempts only for a task that leaves it within what it is owed: under "guarantee" its
  allocation with the task stays within its guarantee, under "fair share" its dominant share
  with the task stays within its fair share.

So a beneficiary ends at or below what it is owed, and a role at or below what it is owed is
never a victim: whoever gained cannot lose it back to whoever lost it. `plan` also stops after
`max_victims` tasks, the caller's bound on kills per round.

Within a role, **priority** decides (reason "priority"): a demand that has waited past the
fair-share timeout may stop tasks of its own role of a lower priority (TaskInfo.priority), as
Slurm's QOS and Kubernetes' PriorityClass do; the role's share does not change, so no other
role is touched. A starved role that no other role can give to may do the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agora.master.allocator.drf import Vector, covers, dominant_share, inverse_totals

__all__ = [
    "Candidate",
    "Preemption",
    "RoleState",
    "fair_shares",
    "plan",
    "starvation",
    "within_limit",
]

# Shares are floats: within this they are equal (a role exactly at its fair share is not below).
EPSILON = 1e-9
GUARANTEE, FAIR_SHARE, PRIORITY = "guarantee", "fair share", "priority"


@dataclass(frozen=True)
class RoleState:
    role: str
    weight: float
    allocated: Vector  # what its tasks hold now, in thousandths (drf.scalar_vector)
    guarantee: Vector  # its quota guarantee; empty: none
    wants: Vector | None  # its next task's shape that nothing free can hold; None: no demand
    starved_since: float | None = None  # when it became starved (the caller keeps track)
    wants_priority: int = 0  # that task's priority (TaskInfo.priority)
    waiting_since: float | None = None  # since when it has had that demand, starved or not
    timeout: float | None = None  # the operator's timeout for this role, over both others
    # The most its tasks may hold under its quota limit (the limit less its unused
    # reservations, which count against it), per limited resource; None: no limit.
    limit: Vector | None = None


@dataclass(frozen=True)
class Candidate:
    """A running task that could be stopped."""

    framework_id: str
    task_id: str
    role: str
    agent_id: str
    resources: Vector
    priority: int = 0
    revocable: bool = False
    started_at: float = 0.0


@dataclass(frozen=True)
class Preemption:
    beneficiary: str  # the starved role
    reason: str  # GUARANTEE or FAIR_SHARE
    agent_id: str
    victims: tuple[Candidate, ...]


def _add(a: Mapping[str, int], b: Mapping[str, int], sign: int = 1) -> Vector:
    out = dict(a)
    for name, value in b.items():
        out[name] = out.get(name, 0) + sign * value
    return out


def fair_shares(roles: Iterable[RoleState]) -> dict[str, float]:
    """Each role's fair dominant share: its weight over the weights of the roles that hold
    or want resources (an idle role is owed nothing, so the others share its part)."""
    active = [r for r in roles if r.wants is not None or any(v > 0 for v in r.allocated.values())]
    total = sum(r.weight for r in active)
    return {r.role: (r.weight / total if total > 0 else 0.0) for r in active}


def within_limit(role: RoleState) -> bool:
    """Whether the role may still be given its next task under its quota limit."""
    if role.wants is None or role.limit is None:
        return True
    return all(
        role.allocated.get(name, 0) + role.wants.get(name, 0) <= cap
        for name, cap in role.limit.items()
    )


def starvation(role: RoleState, fair: float, inverse_total: Mapping[str, float]) -> str | None:
    """Why `role` is starved (GUARANTEE before FAIR_SHARE), or None: never while its next task
    would take it past its quota limit (it could not be offered the room)."""
    if role.wants is None or not within_limit(role):
        return None
    if role.guarantee and not covers(role.allocated, role.guarantee):
        return GUARANTEE
    if dominant_share(role.allocated, inverse_total) < fair - EPSILON:
        return FAIR_SHARE
    return None


def _owed(role: RoleState, reason: str, fair: float, inverse_total) -> bool:
    """Whether the role, given its next task, still holds no more than it is owed (and no more
    than its quota limit allows: it is owed nothing beyond that)."""
    assert role.wants is not None
    if not within_limit(role):
        return False
    after = _add(role.allocated, role.wants)
    if reason == GUARANTEE:
        return all(after.get(name, 0) <= limit for name, limit in role.guarantee.items())
    return dominant_share(after, inverse_total) <= fair + EPSILON


def _keeps(role: RoleState, allocated: Vector, freed: Vector, fair: float, inverse_total) -> bool:
    """Whether `role`, left with `allocated` once `freed` is taken from it, still has its
    fair share, and its guarantee in every resource `freed` holds (a role short of its memory
    guarantee is no shield for the cpus it holds beyond its share)."""
    for name, amount in freed.items():
        if amount > 0 and allocated.get(name, 0) < role.guarantee.get(name, 0):
            return False
    return dominant_share(allocated, inverse_total) >= fair - EPSILON


def _victim_order(candidate: Candidate) -> tuple:
    # Revocable first, then the lowest priority, then the youngest (least work lost).
    return (not candidate.revocable, candidate.priority, -candidate.started_at)


def plan(
    roles: Mapping[str, RoleState],
    total: Vector,
    free: Mapping[str, Vector],
    candidates: Iterable[Candidate],
    now: float,
    guarantee_timeout: float,
    fair_share_timeout: float,
    max_victims: int = 100,
    usable: Mapping[str, Mapping[str, Vector | None]] | None = None,
) -> list[Preemption]:
    """The preemptions to carry out now: for each role starved past its timeout (the most
    starved first), the victims on one agent that make room for its next task.

    `free` is each agent's free vector. `usable`, per role, is what of it that role could be
    offered on each agent (its own reservations and unreserved resources, less the headroom
    kept for other roles' guarantees): room another role reserved, or kept for another's
    guarantee, is no room for it, however free (and lent to revocable tasks) it is. None for
    an agent where the role may be offered nothing at all (draining, or barred by the
    eligibility rule: a GPU agent for a role without a GPU framework): no room, and no task
    there is stopped for it, as what that frees could never be offered to it. A role missing
    from `usable` counts all of `free`, and every agent."""
    inverse_total = inverse_totals(total)
    fair = fair_shares(roles.values())
    allocated = {name: dict(r.allocated) for name, r in roles.items()}
    changed: dict[str, Vector] = {}  # per agent, what this plan frees there less what it takes

    def room(role: str, agent_id: str) -> Vector:
        if usable is not None and role in usable:
            base = usable[role].get(agent_id, {}) or {}
        else:
            base = free.get(agent_id, {})
        return _add(base, changed.get(agent_id, {}))

    def barred(role: str, agent_id: str) -> bool:
        return usable is not None and role in usable and usable[role].get(agent_id, {}) is None

    agents = set(free) | {a for per in (usable or {}).values() for a in per}
    by_agent: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.role in roles:
            by_agent.setdefault(candidate.agent_id, []).append(candidate)
    for tasks in by_agent.values():
        tasks.sort(key=_victim_order)

    def due(role: RoleState) -> str | None:
        current = RoleState(role.role, role.weight, allocated[role.role], role.guarantee,
                            role.wants, role.starved_since, limit=role.limit)  # fmt: skip
        owed = fair.get(role.role, 0.0)
        reason = starvation(current, owed, inverse_total)
        if reason is None or role.starved_since is None:
            return None
        # Below its guarantee but the next task would take it past it: it may still be owed
        # that task as its fair share.
        reasons = [reason] if reason == FAIR_SHARE else [GUARANTEE, FAIR_SHARE]
        for reason in reasons:
            if reason == FAIR_SHARE and dominant_share(current.allocated, inverse_total) >= (
                owed - EPSILON
            ):
                continue
            timeout = guarantee_timeout if reason == GUARANTEE else fair_share_timeout
            if role.timeout is not None:
                timeout = role.timeout
            if now - role.starved_since >= timeout and _owed(current, reason, owed, inverse_total):
                return reason
        return None

    def ratio(role: RoleState) -> float:
        owed = fair.get(role.role, 0.0)
        share = dominant_share(allocated[role.role], inverse_total)
        return share / owed if owed > 0 else 1.0

    def by_priority(role: RoleState) -> bool:
        """Its demand outranks some of its own tasks and has waited past the fair-share
        timeout: lower-priority tasks of its role may go (its allocation stays the same)."""
        return (
            role.wants is not None
            and role.waiting_since is not None
            and now - role.waiting_since >= fair_share_timeout
            and any(t.role == role.role and t.priority < role.wants_priority
                    for tasks in by_agent.values() for t in tasks)
        )  # fmt: skip

    def best_on(role: RoleState, reason: str) -> tuple[tuple, str, list[Candidate]] | None:
        """The agent where the fewest victims (then the least work lost) make room."""
        best: tuple[tuple, str, list[Candidate]] | None = None
        for agent_id, tasks in by_agent.items():
            if barred(role.role, agent_id):
                continue
            victims = _victims_on(tasks, role, room(role.role, agent_id), allocated, roles,
                                  fair, inverse_total, reason == PRIORITY)  # fmt: skip
            if victims is None:
                continue
            lost = sum((now - v.started_at) * v.resources.get("cpus", 0) for v in victims)
            key = (len(victims), lost, agent_id)
            if best is None or key < best[0]:
                best = (key, agent_id, victims)
        return best

    out: list[Preemption] = []
    taken = 0
    for role in sorted(roles.values(), key=lambda r: (ratio(r), r.role)):
        reason = due(role)
        if reason is None and by_priority(role):
            reason = PRIORITY
        if reason is None:
            continue
        assert role.wants is not None
        if any(
            covers(room(role.role, agent_id), role.wants)
            for agent_id in agents
            if not barred(role.role, agent_id)
        ):
            continue  # it fits as things are: the allocator places it, nobody is stopped
        best = best_on(role, reason)
        if best is None and reason != PRIORITY and by_priority(role):
            # Below its share, yet no other role can give (what it lacks is reserved for
            # others, say): its own lower-priority tasks may still make room for its demand.
            reason = PRIORITY
            best = best_on(role, reason)
        if best is None or taken + len(best[2]) > max_victims:
            continue
        _, agent_id, victims = best
        for victim in victims:
            allocated[victim.role] = _add(allocated[victim.role], victim.resources, -1)
            by_agent[agent_id].remove(victim)
        changed[agent_id] = _add(
            _add(changed.get(agent_id, {}), _sum(v.resources for v in victims)), role.wants, -1
        )
        allocated[role.role] = _add(allocated[role.role], role.wants)
        taken += len(victims)
        out.append(Preemption(role.role, reason, agent_id, tuple(victims)))
    return out


def _sum(vectors: Iterable[Vector]) -> Vector:
    out: Vector = {}
    for vec in vectors:
        out = _add(out, vec)
    return out


def _victims_on(
    tasks: list[Candidate],
    role: RoleState,
    room: Vector,
    allocated: Mapping[str, Vector],
    roles: Mapping[str, RoleState],
    fair: Mapping[str, float],
    inverse_total,
    own_role: bool = False,
) -> list[Candidate] | None:
    """Victims among one agent's `tasks`, where the role has `room` already, taken in victim
    order (skipping those that free nothing the role still lacks, or would take their role
    below what it is owed) until the role's next task fits; None if it cannot."""
    assert role.wants is not None
    have = dict(room)
    after = {name: dict(vec) for name, vec in allocated.items()}
    victims: list[Candidate] = []
    for task in tasks:
        if covers(have, role.wants):
            break
        if own_role:
            # Within a role priority decides: only its lower-priority tasks, and its share is
            # unchanged in the end (the new task takes what they held).
            if task.role != role.role or task.priority >= role.wants_priority:
                continue
        else:
            if task.role == role.role:
                continue
            left = _add(after[task.role], task.resources, -1)
            owed = fair.get(task.role, 0.0)
            if not _keeps(roles[task.role], left, task.resources, owed, inverse_total):
                continue
        # Only a task that frees something the role still lacks is worth stopping.
        if not any(
            task.resources.get(name, 0) > 0 and have.get(name, 0) < need
            for name, need in role.wants.items()
        ):
            continue
        after[task.role] = _add(after[task.role], task.resources, -1)
        have = _add(have, task.resources)
        victims.append(task)
    return victims if covers(have, role.wants) else None
