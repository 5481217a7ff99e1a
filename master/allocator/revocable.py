"""Revocable resources: what is free but no framework may be offered, lent out until wanted.

After the offer policy has granted an agent's free resources to whom it may, what is left is
either refused (a framework declined it, or nothing waits) or kept from everyone's ordinary
offers: another role's unused reservations, headroom held back for quota guarantees. That kept
part, and what holds have collected there and sit on until they are met, is offered, as Mesos
does with oversubscribed resources, to frameworks with the REVOCABLE_RESOURCES capability,
marked revocable (Offer.revocable). It stays free in the books:
a revocable offer holds nothing and a revocable task is not an allocation, so shares, quota and
headroom never count them; the agent's own `revocable` record keeps what they use. When an
ordinary launch needs the room back (the agent's allocations and its revocable tasks together
exceed its total), the master stops revocable tasks there at once (TaskBook.revoke_for, which
reads `excess` off its tasks).

Kept apart from the allocator's class, as hold filling is: it runs after the offer policy on
each agent of a cycle, and only when a revocable framework is subscribed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agora.common import EMPTY, UNRESERVED, Resources
from agora.master.allocator.drf import scalar_vector
from agora.master.allocator.eligibility import skip_reason
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent

REVOCABLE_CAPABILITY = "REVOCABLE_RESOURCES"


def amounts(resources: Resources) -> dict[str, float]:
    """Scalars summed per name over roles (ports and other ranges left out)."""
    out: dict[str, float] = {}
    for (name, _role), value in resources.scalars.items():
        out[name] = out.get(name, 0.0) + value
    return out


def unreserved(values: dict[str, float]) -> Resources:
    """Per-name amounts as unreserved resources, 0.001 granularity, nothing below it."""
    kept = {(name, UNRESERVED): round(v, 3) for name, v in values.items() if round(v, 3) > 0}
    return Resources(kept) if kept else EMPTY


def excess(total: Resources, in_use: Iterable[Resources]) -> dict[str, float]:
    """How much more the tasks `in_use` (ordinary and revocable ones) use than the agent's
    `total`, per name (empty: none): what its revocable tasks must give back. Tasks, not
    offers: an ordinary offer outstanding takes nothing back until it is launched on."""
    used: dict[str, float] = {}
    for resources in in_use:
        for name, value in amounts(resources).items():
            used[name] = used.get(name, 0.0) + value
    have = amounts(total)
    return {
        name: round(value - have.get(name, 0.0), 3)
        for name, value in used.items()
        if value - have.get(name, 0.0) > 1e-9
    }


class RevocableOffers:
    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator
        self._turn = 0  # frameworks take turns at being first (the fair thing among equals)

    def offer(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Offers what of the agent's free resources no one may be offered ordinarily, less
        what revocable tasks use and revocable offers hold, to the first revocable framework
        the eligibility rule lets through (one a cycle: it is all or nothing, as the rest)."""
        a = self.a
        idle = amounts(agent.free)
        for hold in a._holds.values():  # what a hold collects sits idle until it is met
            taken = hold.taken.get(agent.agent_id)
            if taken is not None:
                for name, value in amounts(taken[0]).items():
                    idle[name] = idle.get(name, 0.0) + value
        for used in (*agent.revocable.values(), *agent.revocable_offered.values()):
            for name, value in amounts(used).items():
                idle[name] = idle.get(name, 0.0) - value
        if not any(v > 1e-9 for v in idle.values()):
            return
        ids = sorted(a._revocable_frameworks)
        self._turn = (self._turn + 1) % len(ids)
        for fid in ids[self._turn :] + ids[: self._turn]:
            fw = a._frameworks.get(fid)
            if fw is None or not fw.active or fw.suppressed or fid in agent.revocable_offered:
                continue
            if agent.revocable_refused.get(fid, 0.0) > now:
                continue  # it declined what was lent here (its own filter: refuse_revocable)
            # What the framework may be offered ordinarily here is its to take that way.
            ordinary, _ = a._role_offer(agent, a._roles[fw.role], False)
            mine = dict(idle)
            for name, value in amounts(ordinary or EMPTY).items():
                mine[name] = mine.get(name, 0.0) - value
            supply = unreserved({n: v for n, v in mine.items() if v > 0})
            if not supply or not a._fits_min(scalar_vector(supply)):
                continue
            if skip_reason(fw.gpu, agent.gpus, None, supply, now):
                continue
            agent.revocable_offered[fid] = supply
            grants.append(OfferGrant(fid, agent.agent_id, supply, exclusive=False, revocable=True))
            return
