"""Holds collecting resources (holds.py says what a hold is): the stage that runs before the
offer policy on every agent, in either offer mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common import EMPTY, Resources
from agora.master.allocator.drf import scalar_vector
from agora.master.allocator.eligibility import barred
from agora.master.allocator.holds import slots, times
from agora.master.allocator.quota import cap_unreserved
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent, _Framework


class HoldFilling:
    def __init__(self, allocator: Allocator) -> None:
        self.a = allocator
        self.fair: dict[str, float] = {}  # fair shares, computed once per cycle

    def new_cycle(self) -> None:
        self.fair = {}

    def fill(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Holds, oldest first, take what fits of their shape from the agent's free resources;
        a hold that is met is granted everything it took, on every agent, at once.

        The eligibility rule applies without decline filters, and suppression does not stop a
        hold, on purpose: a hold is its framework's own request for resources of one shape,
        made after its declines (a framework declines the offers too small for its gang, then
        asks for a hold), so like a Revive it outranks them; honouring them would make a gang
        wait out a filter for what it just asked for."""
        a = self.a
        for hold in list(a._holds.values()):
            fw = a._frameworks.get(hold.framework_id)
            if fw is None or not fw.active:
                continue
            if hold.distinct and agent.agent_id in hold.taken:
                continue
            if barred(fw.gpu, agent.gpus):
                continue
            free = agent.free.unreserved() if agent.reserved else agent.free
            if a._quota_roles:
                # Quota binds holds as it binds offers: never past the role's limit, and not
                # into the headroom held back for other roles' guarantees.
                caps = a._caps(a._roles[fw.role], False)
                if caps:
                    free = cap_unreserved(free, caps)
            n = slots(free, hold.size, 1 if hold.distinct else hold.remaining)
            # Within the fair share: a framework whose tasks already fill its share collects
            # only as they end (what they give back), never what others are due.
            n = min(n, self._slots_within_share(fw, hold.size))
            if n <= 0:
                continue
            take = times(hold.size, n)
            held = agent.allocated.get(hold.framework_id, EMPTY)
            a._set_allocation(hold.framework_id, agent, held + take)
            before, had = hold.taken.get(agent.agent_id, (EMPTY, 0))
            hold.taken[agent.agent_id] = (before + take, had + n)
            a.hold_touched.add(agent.agent_id)
            if hold.remaining <= 0:
                del a._holds[hold.hold_id]
                for agent_id, (taken, _) in hold.taken.items():
                    grants.append(
                        OfferGrant(hold.framework_id, agent_id, taken, hold_id=hold.hold_id)
                    )
            if not agent.free:
                return

    def _slots_within_share(self, fw: _Framework, size: Resources) -> int:
        """How many more tasks of `size` fit under the framework's fair share, or under its
        role's quota guarantee where that is more (a guarantee is owed whatever the shares:
        a gang as big as its guarantee must be able to collect it)."""
        fid = fw.framework_id
        fair = self.fair.get(fid)
        if fair is None:  # once per framework and cycle: it walks every role and framework
            fair = self.fair[fid] = self.a._fair_shares(fid).get(fid, 0.0)
        inv = self.a._inv_total
        role = self.a._roles.get(fw.role)
        guarantee = role.quota.guarantee if role is not None and role.quota is not None else {}
        n = 1 << 30
        for name, amount in scalar_vector(size).items():
            scale = inv.get(name)
            if amount <= 0 or not scale:
                continue
            room = fair / scale - fw.vec.get(name, 0)
            if guarantee and role is not None:
                room = max(room, guarantee.get(name, 0) - role.vec.get(name, 0))
            n = min(n, int((room + 1e-6) // amount) if room > 0 else 0)
        return n
