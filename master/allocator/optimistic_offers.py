"""Optimistic offers (`--offer-mode optimistic`): an agent's free resources go, without being
held, to the first few frameworks in DRF order at once (optimistic.py has the fairness rule an
Accept must then pass)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.master.allocator.drf import scalar_vector
from agora.master.allocator.eligibility import skip_reason
from agora.master.allocator.optimistic import beyond
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent


class OptimisticOffers:
    name = "optimistic"

    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator
        self.fanout = allocator.config.optimistic_fanout

    def offer(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Offers the agent's free resources to at most `fanout` frameworks at once, the first
        in DRF order the eligibility rule lets through; a framework that already holds an
        offer here is offered only what freed up beyond it. Whom it offered and whom it
        skipped, and why, is left on the agent (eligibility.Visit)."""
        a = self.a
        if not a._fits_min(agent.free_vec):
            return
        holders = agent.offered
        room = self.fanout - len(holders)
        if room <= 0 and all(offered == agent.free for offered, _ in holders.values()):
            return  # the usual sweep: every holder has been offered all there is
        unseen = len(holders)  # holders not visited yet (each may need a top-up)
        refused = a._filters.by_agent.get(agent.agent_id) or {}
        agent_id = agent.agent_id
        offered, skipped = agent.visit_offered, agent.visit_skipped  # eligibility.Visit
        offered.clear()
        skipped.clear()
        try:
            for role_name in a._role_sorter.peek_order():
                role = a._roles[role_name]
                role_offer, _ = a._role_offer(agent, role, False)
                if role_offer is None:
                    continue
                for fid in role.sorter.peek_order():
                    had = holders.get(fid)
                    if had is None and room <= 0:
                        if unseen <= 0:
                            return
                        continue
                    if had is not None:
                        unseen -= 1
                    extra = role_offer if had is None else beyond(role_offer, had[0])
                    extra_vec = scalar_vector(extra)
                    if not extra or not a._fits_min(extra_vec):
                        continue
                    fw = a._frameworks[fid]
                    # The rule judges what this framework would be offered now: its top-up.
                    why = skip_reason(
                        fw.gpu, agent.gpus, refused.get(fid), extra, now, fw.smallest, extra_vec
                    )
                    if why is not None:
                        skipped[fid] = why
                        continue
                    if had is None:
                        room -= 1
                        holders[fid] = (extra, now)
                        fw.offered_on.add(agent_id)
                    else:
                        holders[fid] = (had[0] + extra, had[1])
                    offered.append(fid)
                    grants.append(OfferGrant(fid, agent_id, extra, exclusive=False))
        finally:
            agent.visit_at = now
            agent.visit_free = agent.free
