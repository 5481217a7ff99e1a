"""Pessimistic offers (Mesos' way, the default): an agent's free resources go to one framework
at a time and are held for it while it decides.

On each agent, roles below their quota guarantee are served first (stage 1, up to the
guarantee), then every role in its sorter's order (stage 2), each role's frameworks in theirs;
a framework the eligibility rule passes over (eligibility.py) is skipped, and the first one it
lets through is granted all that its role may be offered there. Whom it offered and whom it
skipped, and why, is left on the agent (eligibility.Visit) for "why no offers" to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.master.allocator.eligibility import skip_reason
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent


class PessimisticOffers:
    name = "pessimistic"

    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator

    def offer(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Grants what the agent has free to the first frameworks in line that may take it,
        and leaves on the agent whom it offered and why the rule passed others over."""
        a = self.a
        fits = a._fits_min
        if not fits(agent.free_vec):
            return
        offered, skipped = agent.visit_offered, agent.visit_skipped
        if offered:
            offered.clear()
        if skipped:
            skipped.clear()
        try:  # the record is written however the visit ends
            quota_on = bool(a._quota_roles)
            refused = a._filters.by_agent.get(agent.agent_id) or {}
            if quota_on and a._required_headroom():
                self._guarantees(agent, now, grants, refused, offered, skipped)
                if not agent.free or not fits(agent.free_vec):
                    return
            elif not agent.reserved:
                # Fast path, the common case: no reservation, and no guarantee waiting for
                # headroom, so every framework of a role without a quota limit would be offered
                # the whole free agent, and the first one in line the rule lets through takes it.
                # Peeking reads the heaps without changing them (nothing to put back), and
                # usually stops at the head.
                frameworks = a._frameworks
                free, gpus = agent.free, agent.gpus
                if not refused and not gpus and not quota_on and not a._sized:  # O(1)
                    role_name = a._role_sorter.first()
                    if role_name is None:
                        return
                    role = a._roles[role_name]
                    fid = role.sorter.first()
                    if fid is not None:
                        a._grant(frameworks[fid], role, agent, free, agent.free_vec, grants)
                        offered.append(fid)
                        return
                for role_name in a._role_sorter.peek_order():
                    role = a._roles[role_name]
                    if role.quota is not None and role.quota.limit is not None:
                        break  # its offers are cut to the limit: the general path below
                    for fid in role.sorter.peek_order():
                        fw = frameworks[fid]
                        why = skip_reason(
                            fw.gpu, gpus, refused.get(fid), free, now, fw.smallest, agent.free_vec
                        )
                        if why is not None:
                            skipped[fid] = why
                            continue
                        # The sorters change under the grant: stop peeking now.
                        a._grant(fw, role, agent, free, agent.free_vec, grants)
                        offered.append(fid)
                        return
                else:
                    return  # nobody may take this agent now
            # General path: reservations or quota make the offer depend on the role, and a grant
            # may leave something for the next framework or role on the same agent.
            self._in_order(
                agent, now, grants, refused, a._role_sorter.sorted(), False, offered, skipped
            )
        finally:
            agent.visit_at = now
            agent.visit_free = agent.free

    def _guarantees(
        self, agent: _Agent, now: float, grants: list[OfferGrant], refused, offered, skipped
    ) -> None:
        """Stage 1: roles below their guarantee get this agent first, up to the guarantee."""
        a = self.a
        sorter = a._role_sorter
        waiting = []
        for name in a._quota_roles:
            r = a._roles[name]
            quota = r.quota  # set: it is a quota role
            if r.eligible and quota and quota.guarantee and quota.unmet(a._consumption(r)):
                waiting.append((sorter.share(name) / sorter.weight(name), name))
        waiting.sort()
        roles = (name for _, name in waiting)
        self._in_order(agent, now, grants, refused, roles, True, offered, skipped)

    def _in_order(
        self,
        agent: _Agent,
        now: float,
        grants,
        refused,
        role_iter,
        guarantee_stage,
        offered: list[str],
        skipped: dict[str, str],
    ) -> None:
        """Roles in `role_iter`'s order, each role's frameworks in its sorter's: every one the
        rule lets through is granted what its role may be offered, until the agent is spent.
        Adds whom it granted to `offered`, and whom the rule passed over to `skipped`."""
        a = self.a
        fits = a._fits_min
        frameworks = a._frameworks
        try:
            for role_name in role_iter:
                role = a._roles[role_name]
                role_offer, role_vec = a._role_offer(agent, role, guarantee_stage)
                if role_offer is None:
                    continue
                fw_iter = role.sorter.sorted()
                try:
                    for fid in fw_iter:
                        fw = frameworks[fid]
                        why = skip_reason(
                            fw.gpu,
                            agent.gpus,
                            refused.get(fid),
                            role_offer,
                            now,
                            fw.smallest,
                            role_vec,
                        )
                        if why is not None:
                            skipped[fid] = why
                            continue
                        a._grant(fw, role, agent, role_offer, role_vec, grants)
                        offered.append(fid)
                        if not agent.free or not fits(agent.free_vec):
                            return
                        role_offer, role_vec = a._role_offer(agent, role, guarantee_stage)
                        if role_offer is None:
                            break
                finally:
                    fw_iter.close()
        finally:
            role_iter.close()
