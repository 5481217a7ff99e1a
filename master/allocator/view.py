"""A read-only view of the allocator's state, for code that explains its decisions.

`explain` (and any report) reads the allocator through this view rather than its private
members, so the allocator can change how it keeps its state without breaking them. The view
only reads; nothing it returns is to be modified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from agora.common import Resources
from agora.master.allocator.eligibility import FILTERED, Visit, barred, recorded, skip_reason

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator


class Judged(NamedTuple):
    """One agent through the eligibility rule, for one framework (AllocatorView.judge)."""

    agent: Any  # the allocator's agent entry (agent_id, active, free, gpus)
    offer: Resources | None  # what the framework's role could be offered there now
    plain: Resources  # the same before quota caps
    why: str | None  # the rule's reason to pass the framework over, or None
    until: float | None  # when the framework's decline filter there expires, if it has one
    decided_at: float | None  # when the cycle whose record `why` is ran; None: judged now


__all__ = ["AllocatorView", "Judged", "Visit"]


class AllocatorView:
    def __init__(self, allocator: Allocator) -> None:
        self._a = allocator

    def framework(self, framework_id: str):
        """The framework's entry (role, active, suppressed, gpu, vec, allocated), or None."""
        return self._a._frameworks.get(framework_id)

    def role(self, name: str):
        """The role's entry (name, quota, vec)."""
        return self._a._roles[name]

    def frameworks_of(self, role) -> list:
        """The entries of the role's frameworks."""
        return [self._a._frameworks[f] for f in role.frameworks if f in self._a._frameworks]

    def agents(self) -> Iterable:
        """Every agent's entry (agent_id, active, free, gpus)."""
        return self._a._agents.values()

    def preemption_roles(self) -> tuple[dict[str, tuple[float, dict, dict, dict | None]], dict]:
        """What preemption times starvation on (master/allocator/preemption.py): each role's
        (weight, guarantee vector, allocation vector, limit), and the cluster's total vector.
        The limit is the most the role's tasks may hold under its quota limit: the limit less
        its unused reservations, which count against it (None: no limit)."""
        a = self._a
        roles = {
            name: (
                r.weight,
                dict(r.quota.guarantee) if r.quota else {},
                dict(r.vec),
                self._limit(r),
            )
            for name, r in a._roles.items()
        }
        return roles, dict(a._total)

    def _limit(self, role) -> dict | None:
        quota = role.quota
        if quota is None or quota.limit is None:
            return None
        consumed = self._a._consumption(role)
        return {
            name: cap - (consumed.get(name, 0) - role.vec.get(name, 0))
            for name, cap in quota.limit.items()
        }

    def preemption_free(self) -> dict[str, dict]:
        """Each active agent's free vector (read only when a preemption may be due)."""
        return {
            agent.agent_id: dict(agent.free_vec)
            for agent in self._a._agents.values()
            if agent.active
        }

    def preemption_room(self, roles: Iterable[str]) -> dict[str, dict[str, dict | None]]:
        """For each role named, what it could be offered on each active agent with something
        free now: its own reservations and the unreserved resources, cut to its quota limit and
        less the headroom held back for other roles' guarantees (read only for roles that may
        preempt now). Lent room, free in the books, is in it where the role may be offered it:
        launching there stops the lent tasks at once, so they are stopped before anyone's
        allocation is. The vectors are the allocator's own where nothing cuts them: read only.

        None for an agent where the role may be offered nothing at all, however much is freed:
        a draining agent, or one where the eligibility rule bars every framework of the role
        (eligibility.barred: a GPU agent is no room for a role without a GPU framework), so
        preemption neither counts its room nor stops tasks there for the role. Filters do not
        bar: what preemption frees is more than a framework declined there."""
        a = self._a
        out: dict[str, dict[str, dict | None]] = {}
        for name in roles:
            role = a._roles.get(name)
            if role is None:
                continue
            # The caps (quota limit, others' headroom) are the role's, the same on every agent.
            caps = a._caps(role, False) if a._quota_roles else {}
            # The rule's answer, filters aside, depends on whether the agent has GPUs only: ask
            # it once for each kind of agent, of the role's frameworks until one may be offered.
            # (A role with no framework has nobody to bar: the caller asks for it anyway.)
            kept = {
                gpus: bool(role.frameworks)
                and all(barred(a._frameworks[fid].gpu, gpus) for fid in role.frameworks)
                for gpus in (False, True)
            }
            room: dict[str, dict | None] = {}
            for agent in a._agents.values():
                if not agent.active or kept[agent.gpus]:
                    room[agent.agent_id] = None
                elif agent.free:
                    room[agent.agent_id] = a._role_offer(agent, role, False, caps)[1]
            out[name] = room
        return out

    def last_cycle(self, agent_id: str) -> Visit | None:
        """What the last cycle that offered the agent decided there (eligibility.Visit), or
        None; it stands while `visit.free is agent.free` (nothing freed or taken since)."""
        agent = self._a._agents[agent_id]
        if agent.visit_at is None:
            return None
        offered, skipped = tuple(agent.visit_offered), dict(agent.visit_skipped)
        return Visit(agent.visit_at, agent.visit_free, offered, skipped)

    def judge(self, framework_id: str, now: float) -> list[Judged]:
        """The eligibility rule's verdict (eligibility.py) for the framework on every active
        agent with something free: what its role could be offered there (None: nothing above
        the minimum once quota caps apply), before the caps, and why the framework is passed
        over there.

        The verdict is the record of the last cycle on that agent (eligibility.Visit) where it
        stands and decided on this framework: a decision is explained by what it did. Where it
        does not (no cycle has offered the agent since its free resources last changed, the
        cycle did not reach the framework, or the filter it met has expired or was revived),
        the same rule is applied now, to the offer of the ordinary stage (pessimistic stage 2,
        or an optimistic first offer): a role below its guarantee is offered up to the
        guarantee first, and an optimistic holder only its top-up, so there the decision may
        weigh a smaller amount against a filter than this explanation does."""
        a = self._a
        fw = a._frameworks[framework_id]
        role = a._roles[fw.role]
        refusals = a._filters.active(framework_id, now)
        out = []
        for agent in a._agents.values():
            if not agent.active or not agent.free:
                continue
            offer = self.role_offer(agent, role)
            plain = self.plain_offer(agent, role)
            refusal = refusals.get(agent.agent_id)
            until = refusal.until if refusal is not None else None
            if agent.visit_at is not None and agent.visit_free is agent.free:  # it stands
                decided, why = recorded(agent.visit_offered, agent.visit_skipped, framework_id)
                if decided and (why != FILTERED or refusal is not None):
                    out.append(Judged(agent, offer, plain, why, until, agent.visit_at))
                    continue
            # Without an offer a filter hides nothing: it is the caps or the scraps that do.
            why = skip_reason(
                fw.gpu,
                agent.gpus,
                refusal if offer is not None else None,
                offer or plain,
                now,
                fw.smallest,
            )
            out.append(Judged(agent, offer, plain, why, until, None))
        return out

    def consumption(self, role) -> Mapping[str, float]:
        return self._a._consumption(role)

    def fits_min(self, vector: Mapping[str, float]) -> bool:
        return self._a._fits_min(vector)

    def role_offer(self, agent, role):
        """What the role could be offered on the agent now, or None."""
        offer, _vector = self._a._role_offer(agent, role, False)
        return offer

    @property
    def has_quota_roles(self) -> bool:
        return bool(self._a._quota_roles)

    def plain_offer(self, agent, role):
        """What the agent has free for the role before quota caps (limit, headroom)."""
        return agent.free_for(role.name)

    def headroom_roles(self) -> list[tuple[Any, Resources]]:
        """(role entry, what it lacks of its guarantee as Resources) for every role below its
        quota guarantee: the roles the free resources are held back for."""
        out = []
        for name in sorted(self._a._quota_roles):
            role = self._a._roles[name]
            lack = self._a._headroom_of(role)
            if lack:
                out.append((role, lack))
        return out

    @property
    def inverse_totals(self) -> Mapping[str, float]:
        return self._a._inv_total

    @property
    def min_allocatable(self):
        return self._a.config.min_allocatable

    def framework_order(self) -> list[str]:
        return list(self._a.framework_order())
