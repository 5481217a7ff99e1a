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

from agora.common import Resources
from agora.master.allocator.drf import Vector, scalar_vector, vector_resources
from agora.master.allocator.eligibility import barred
from agora.master.allocator.quota import add_into
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent

REVOCABLE_CAPABILITY = "REVOCABLE_RESOURCES"


def excess(total: Resources, in_use: Iterable[Resources]) -> Vector:
    """How much more the tasks `in_use` (ordinary and revocable ones) use than the agent's
    `total`, per name in thousandths (empty: none): what its revocable tasks must give back.
    Tasks, not offers: an ordinary offer outstanding takes nothing back until launched on."""
    used: Vector = {}
    for resources in in_use:
        add_into(used, scalar_vector(resources))
    add_into(used, scalar_vector(total), -1)
    return {name: value for name, value in used.items() if value > 0}


class RevocableOffers:
    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator
        self._turn = 0  # frameworks take turns at being first (the fair thing among equals)

    def offer(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Offers what of the agent's free resources no one may be offered ordinarily, less
        what revocable tasks use and revocable offers hold, to the first revocable framework
        the eligibility rule lets through (one a cycle: it is all or nothing, as the rest)."""
        a = self.a
        held = [h.taken[agent.agent_id][0] for h in a._holds.values() if agent.agent_id in h.taken]
        if not agent.free_vec and not held:
            return  # the common case: the offer policy granted all of it
        idle: Vector = dict(agent.free_vec)
        for taken in held:  # what a hold collects sits idle until it is met
            add_into(idle, scalar_vector(taken))
        for used in (*agent.revocable.values(), *agent.revocable_offered.values()):
            add_into(idle, scalar_vector(used), -1)
        if not any(v > 0 for v in idle.values()):
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
            ordinary, ordinary_vec = a._role_offer(agent, a._roles[fw.role], False)
            mine = dict(idle)
            if ordinary is not None:
                add_into(mine, ordinary_vec, -1)
            supply_vec = {name: value for name, value in mine.items() if value > 0}
            if not supply_vec or not a._fits_min(supply_vec):
                continue
            supply = vector_resources(supply_vec)
            if barred(fw.gpu, agent.gpus):
                continue
            agent.revocable_offered[fid] = supply
            grants.append(OfferGrant(fid, agent.agent_id, supply, exclusive=False, revocable=True))
            return
