"""The allocator: hierarchical DRF over roles and frameworks, with quota, filters, reservations.

Pure: the caller passes `now` and gets OfferGrants back; nothing here does I/O or reads a clock.
It does not log either: the master logs the offers it makes of the grants, and explain() says
why a framework gets none. (A log call per agent would also cost more than the decision.)
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Mapping
from itertools import chain

from agora.common import EMPTY, UNRESERVED, Resources
from agora.master.allocator.drf import (
    MILLI,
    Vector,
    covers,
    dominant_share,
    inverse_totals,
    scalar_vector,
    vector_resources,
)
from agora.master.allocator.eligibility import barred
from agora.master.allocator.filters import DeclineFilters
from agora.master.allocator.hold_filling import HoldFilling
from agora.master.allocator.holds import Hold, slots, times
from agora.master.allocator.optimistic import Rival, beyond, fair_shares, priority_rival
from agora.master.allocator.policies import OFFER_POLICIES, OfferPolicy
from agora.master.allocator.quota import (
    Quota,
    add_into,
    cap_unreserved,
    make_quota,
    min_caps,
    required_headroom,
)
from agora.master.allocator.revocable import REVOCABLE_CAPABILITY, RevocableOffers
from agora.master.allocator.sorters import make_sorter
from agora.master.allocator.types import MAX_REFUSE_SECONDS, AllocatorConfig, OfferGrant
from agora.master.allocator.view import AllocatorView

GPU_CAPABILITY = "GPU_RESOURCES"


class HoldRefused(ValueError):
    """A hold the allocator will not take on; the message says what to change."""


class _Agent:
    __slots__ = (
        "agent_id",
        "total",
        "attributes",
        "active",
        "allocated",
        "free",
        "free_vec",
        "levels",
        "seq",
        "reserved",
        "gpus",
        "offered",
        "revocable",
        "revocable_offered",
        "revocable_refused",
        "visit_at",
        "visit_free",
        "visit_offered",
        "visit_skipped",
    )

    def __init__(self, agent_id: str, total: Resources, attributes: Mapping[str, str]) -> None:
        self.agent_id = agent_id
        self.total = total
        self.attributes = dict(attributes)
        self.active = True
        self.allocated: dict[str, Resources] = {}  # framework_id -> resources (offered or used)
        self.free: Resources = EMPTY
        self.free_vec: Vector = {}
        # Its free cpus and mem (thousandths) as Allocator._by_level has them filed.
        self.levels: dict[str, int] = {}
        self.seq = 0  # its place in the order agents were added (sweeps visit in that order)
        self.reserved = False  # free holds reservations: offers need allocatable_to(role)
        self.gpus = total.scalar("gpus") > 0  # the eligibility rule reads it (GPU_AGENT)
        # Optimistic offers outstanding on this agent, which hold nothing: framework_id ->
        # (resources offered, when it was first offered them).
        self.offered: dict[str, tuple[Resources, float]] = {}
        # Revocable resources (revocable.py), which stay free in these books: framework_id ->
        # what its revocable tasks use here, and -> its revocable offer outstanding here.
        self.revocable: dict[str, Resources] = {}
        self.revocable_offered: dict[str, Resources] = {}
        self.revocable_refused: dict[str, float] = {}  # framework_id -> refused until
        # What the last cycle that offered this agent decided here (eligibility.Visit): when
        # (None: no cycle yet, or the record was dropped), the free resources it left, whom it
        # offered, and whom the rule passed over and why. The policies empty and refill the
        # same list and dict every cycle: a record per agent per cycle allocates nothing.
        self.visit_at: float | None = None
        self.visit_free: Resources = EMPTY
        self.visit_offered: list[str] = []
        self.visit_skipped: dict[str, str] = {}

    def free_for(self, role: str) -> Resources:
        """What is free here for a framework of `role`, before quota caps: the unreserved
        resources and the role's own reservations."""
        return self.free.allocatable_to(role) if self.reserved else self.free


class _Framework:
    __slots__ = (
        "framework_id",
        "role",
        "capabilities",
        "gpu",
        "active",
        "suppressed",
        "allocated",
        "vec",
        "offered_on",
        "wants",
        "out",
        "sated",
        "smallest",
    )

    def __init__(self, framework_id: str, role: str, capabilities: frozenset[str]) -> None:
        self.framework_id = framework_id
        self.role = role
        self.capabilities = capabilities
        self.gpu = GPU_CAPABILITY in capabilities
        self.active = True
        self.suppressed = False
        self.allocated: dict[str, Resources] = {}  # agent_id -> resources
        self.vec: Vector = {}  # allocated scalars summed over agents
        self.offered_on: set[str] = set()  # agents where it holds optimistic offers
        # Offers sized by demand (set_wants): what it waits to launch in total (None: no
        # limit), what its unanswered offers hold, and whether they cover the first.
        self.wants: Vector | None = None
        self.out: Vector = {}
        self.sated = False
        self.smallest: Vector | None = None  # its smallest waiting task: smaller offers skip it


class _Role:
    __slots__ = ("name", "sorter", "frameworks", "eligible", "weight", "quota", "vec")

    def __init__(self, name: str, sorter) -> None:
        self.name = name
        self.sorter = sorter  # orders this role's frameworks
        self.frameworks: set[str] = set()
        self.eligible = 0  # frameworks active and not suppressed
        self.weight = 1.0
        self.quota: Quota | None = None
        self.vec: Vector = {}  # allocated to its frameworks


class Allocator:
    """Hierarchical weighted DRF: roles by weighted dominant share, frameworks within a role.

    Keeps the books (agents, frameworks, roles, quota pools, filters, holds); every cycle
    visits the given agents and, on each, lets holds collect (hold_filling.py) and then the
    offer policy (policies.py: pessimistic or optimistic) grant what is free, passing over
    whom the eligibility rule says (eligibility.py).
    """

    def __init__(self, config: AllocatorConfig | None = None) -> None:
        self.config = config or AllocatorConfig()
        self._min: list[Vector] = [scalar_vector(m) for m in self.config.min_allocatable_set]
        self._agents: dict[str, _Agent] = {}
        # The agents by free cpus and by free mem (thousandths), and those amounts ascending:
        # they tell how many agents have a floor's (_offer_floor) cpus free, or its mem, and
        # which, without visiting any (_sweep).
        self._by_level: dict[str, dict[int, dict[str, _Agent]]] = {n: {} for n in _INDEXED}
        self._levels: dict[str, list[int]] = {n: [] for n in _INDEXED}
        self._added = 0
        # Every agent in the order it joined (by seq), and where the last sweep that stopped
        # early stopped: the next starts after it (_from_resume).
        self._ring: list[_Agent] = []
        self._resume = 0
        # For the last few floors (cpus, mem) few agents had free, those agents (_sweep); and
        # for floors that too many have, the count of changes to free amounts (_changes)
        # before which they cannot have become few, one agent a change at most. The floor
        # moves between frameworks' smallest tasks: a few are current at once.
        self._rooms: dict[tuple[int, int], _Room] = {}
        self._dense: dict[tuple[int, int], int] = {}
        self._changes = 0
        self._frameworks: dict[str, _Framework] = {}
        self._roles: dict[str, _Role] = {}
        self._role_sorter = make_sorter(self.config.role_sorter, self.config.seed)
        self._filters = DeclineFilters()
        # Declined revocable offers' ends (until, agent, framework), soonest first: each is a
        # moment lent room may be offered again, as a decline filter's expiry is.
        self._revocable_refusals: list[tuple[float, str, str]] = []
        # Allocations reported by agents for frameworks not (yet) added: fid -> agent ids.
        self._orphans: dict[str, set[str]] = {}
        self._total: Vector = {}
        self._inv_total: dict[str, float] = {}
        self._shares_dirty = False  # the total changed: every share must be recomputed
        self._free_unreserved: Vector = {}  # over active agents: the headroom pool
        self._free_reserved: dict[str, Vector] = {}  # role -> unallocated reservations
        self._quota_roles: set[str] = set()
        # What all unmet guarantees still need, cached until a quota role's consumption moves.
        self._headroom_cache: Vector | None = None
        # Holds collecting resources, oldest first (holds.py), and the stage that fills them.
        self._holds: dict[str, Hold] = {}
        self._hold_filling = HoldFilling(self)
        # Frameworks with the REVOCABLE_RESOURCES capability, and the stage that lends them
        # what is free but kept from everyone's ordinary offers (revocable.py).
        self._revocable_frameworks: set[str] = set()
        self._revocable = RevocableOffers(self)
        # How free resources become offers, chosen by name (policies.py).
        self._policy: OfferPolicy = OFFER_POLICIES[self.config.mode](self)
        # Agents where a hold took free resources since the caller last emptied this: in
        # optimistic mode, offers there may no longer be satisfiable.
        self.hold_touched: set[str] = set()
        # Frameworks that said what they want (set_wants), and whether one of them became
        # hungry again since the caller last asked (take_reopened): any agent may be for it.
        self._wanting: set[str] = set()
        self._sized: set[str] = set()  # those of them that said their smallest task
        # _offer_floor's answer, worked out again after a change of eligibility or smallest.
        self._floor: Vector | None = None
        self._floor_stale = True
        self._reopened: set[str] = set()

    # agents ---------------------------------------------------------------------------------

    def add_agent(
        self,
        agent_id: str,
        total: Resources,
        attributes: Mapping[str, str] | None = None,
        allocated: Mapping[str, Resources] | None = None,
    ) -> None:
        """Adds an agent; `allocated` is what its running tasks use (framework_id -> resources).

        Adding a known agent id replaces it (re-registration with a fresh report).
        """
        if agent_id in self._agents:
            self.remove_agent(agent_id)
        in_use = EMPTY
        for res in (allocated or {}).values():
            in_use = in_use + res
        if not total.contains(in_use):
            raise ValueError(
                f"agent {agent_id}: in-use resources {in_use} exceed its total {total}"
            )
        agent = _Agent(agent_id, total, attributes or {})
        self._added += 1
        agent.seq = self._added
        self._agents[agent_id] = agent
        self._ring.append(agent)  # the highest seq yet: the ring stays in order
        add_into(self._total, scalar_vector(total))
        self._shares_dirty = True
        self._set_free(agent, total - in_use)
        for fid, res in (allocated or {}).items():
            if not res:
                continue
            agent.allocated[fid] = res
            fw = self._frameworks.get(fid)
            if fw is None:
                self._orphans.setdefault(fid, set()).add(agent_id)
            else:
                fw.allocated[agent_id] = res
                self._account(fw, scalar_vector(res), 1)

    def remove_agent(self, agent_id: str) -> None:
        """Forgets an agent with everything allocated on it (its tasks are gone with it)."""
        agent = self._agents.pop(agent_id, None)
        if agent is None:
            return
        del self._ring[bisect.bisect_left(self._ring, agent.seq, key=_seq)]
        self._changes += 1
        for room in self._rooms.values():
            room.discard(agent)
        for name, level in agent.levels.items():
            self._unfile(name, level, agent_id)
        for fid, res in agent.allocated.items():
            fw = self._frameworks.get(fid)
            if fw is None:
                self._orphans.get(fid, set()).discard(agent_id)
            else:
                del fw.allocated[agent_id]
                self._account(fw, scalar_vector(res), -1)
        for fid in agent.offered:
            if (fw := self._frameworks.get(fid)) is not None:
                fw.offered_on.discard(agent_id)
        for hold in self._holds.values():
            hold.taken.pop(agent_id, None)  # gone with the agent's allocations above
        self._free_contribution(agent, -1)
        add_into(self._total, scalar_vector(agent.total), -1)
        self._total = {n: v for n, v in self._total.items() if v > 0}
        self._shares_dirty = True

    def deactivate_agent(self, agent_id: str) -> None:
        """Draining: no new offers on this agent; what is allocated stays."""
        agent = self._agents[agent_id]
        if agent.active:
            self._free_contribution(agent, -1)
            agent.active = False
            self._free_contribution(agent, 1)
        # A hold collects on agents it may be offered: what it took here goes back.
        for hold in self._holds.values():
            taken = hold.taken.pop(agent_id, None)
            if taken is not None:
                self._give_back(hold, agent, taken[0])

    def activate_agent(self, agent_id: str) -> None:
        agent = self._agents[agent_id]
        if not agent.active:
            self._free_contribution(agent, -1)
            agent.active = True
            self._free_contribution(agent, 1)

    # frameworks -----------------------------------------------------------------------------

    def add_framework(
        self,
        framework_id: str,
        role: str = UNRESERVED,
        capabilities: Iterable[str] = frozenset(),
        allocated: Mapping[str, Resources] | None = None,
        suppressed: bool = False,
    ) -> None:
        """Adds a framework; `allocated` (agent_id -> resources) is what its tasks already use.

        Allocations on agents not added yet are ignored: the agent reports them when it comes.
        An agent's own report (add_agent) and this one agree on the same task table; if both
        name a (framework, agent) pair, the later call's amount is kept.
        """
        if framework_id in self._frameworks:
            raise ValueError(
                f"framework {framework_id} already added; use activate_framework on failover"
            )
        fw = _Framework(framework_id, role or UNRESERVED, frozenset(capabilities))
        r = self._role(fw.role)
        self._frameworks[framework_id] = fw
        if REVOCABLE_CAPABILITY in fw.capabilities:
            self._revocable_frameworks.add(framework_id)
        r.frameworks.add(framework_id)
        r.sorter.add(framework_id)
        for agent_id in self._orphans.pop(framework_id, set()):
            res = self._agents[agent_id].allocated[framework_id]
            fw.allocated[agent_id] = res
            self._account(fw, scalar_vector(res), 1)
        for agent_id, res in (allocated or {}).items():
            agent = self._agents.get(agent_id)
            if agent is not None:
                self._set_allocation(framework_id, agent, res)
        fw.suppressed = suppressed
        self._sync_eligibility(fw)

    def remove_framework(self, framework_id: str) -> None:
        """Forgets a framework; its allocations on every agent become free."""
        fw = self._frameworks.get(framework_id)
        if fw is None:
            return
        for hold in self.holds_of(framework_id):
            del self._holds[hold.hold_id]  # what it took is freed with the rest below
        for agent_id in fw.offered_on:
            self._agents[agent_id].offered.pop(framework_id, None)
        fw.offered_on.clear()
        for agent_id in list(fw.allocated):
            self._set_allocation(framework_id, self._agents[agent_id], EMPTY)
        self._revocable_frameworks.discard(framework_id)
        for agent in self._agents.values():  # its revocable tasks and offers end with it
            agent.revocable.pop(framework_id, None)
            agent.revocable_offered.pop(framework_id, None)
            agent.revocable_refused.pop(framework_id, None)
        fw.active = False
        self._wanting.discard(framework_id)
        self._sized.discard(framework_id)
        self._sync_eligibility(fw)
        r = self._roles[fw.role]
        r.sorter.remove(framework_id)
        r.frameworks.discard(framework_id)
        del self._frameworks[framework_id]
        self._filters.clear_framework(framework_id)
        self._maybe_drop_role(r)

    def update_framework(self, framework_id: str, capabilities: Iterable[str]) -> None:
        """New capabilities, e.g. from a re-subscription after failover."""
        fw = self._frameworks[framework_id]
        fw.capabilities = frozenset(capabilities)
        gpu = GPU_CAPABILITY in fw.capabilities
        if gpu != fw.gpu:
            fw.gpu = gpu
            for agent in self._agents.values():
                if agent.gpus:
                    agent.visit_at = None  # it may have been passed over for the capability
        if REVOCABLE_CAPABILITY in fw.capabilities:
            self._revocable_frameworks.add(framework_id)
        else:
            self._revocable_frameworks.discard(framework_id)

    def deactivate_framework(self, framework_id: str) -> None:
        """Disconnected: no offers until activate_framework; allocations stay."""
        fw = self._frameworks[framework_id]
        fw.active = False
        self._sync_eligibility(fw)

    def activate_framework(self, framework_id: str) -> None:
        fw = self._frameworks[framework_id]
        fw.active = True
        self._sync_eligibility(fw)

    def suppress(self, framework_id: str) -> None:
        """No offers to this framework until revive()."""
        fw = self._frameworks[framework_id]
        fw.suppressed = True
        self._sync_eligibility(fw)

    def revive(self, framework_id: str) -> None:
        """Offers resume, and every decline filter of the framework is dropped, its refusals
        of lent room too: a revive asks for everything again, as in Mesos."""
        fw = self._frameworks[framework_id]
        fw.suppressed = False
        self._filters.clear_framework(framework_id)
        if framework_id in self._revocable_frameworks:
            for until, agent_id, fid in self._revocable_refusals:  # stale entries skip later
                if fid == framework_id and self._refusal_stands(until, agent_id, fid):
                    del self._agents[agent_id].revocable_refused[fid]
        self._sync_eligibility(fw)

    # offers sized by demand ----------------------------------------------------------------

    def set_wants(
        self,
        framework_id: str,
        wants: Resources | None,
        out: Resources = EMPTY,
        smallest: Resources | None = None,
    ) -> None:
        """What the framework waits to launch, in total; None: no limit (Mesos' way, every agent
        with room is offered). While its unanswered offers (`out`: those it holds now) cover
        every amount it wants, it is passed over as if suppressed. answered() and launched()
        keep both up to date: an offer made adds to `out`, one answered takes from it, and a
        launch takes what it uses off `wants`. `smallest`: no task it waits for is smaller (in
        any amount), so an offer that cannot hold it is not made to it (eligibility.TOO_SMALL);
        without it, the next offer after a scrap that fits nothing would wait a round trip."""
        fw = self._frameworks[framework_id]
        if wants is None:
            fw.wants, fw.out = None, {}
            self._wanting.discard(framework_id)
        else:
            fw.wants = _positive(scalar_vector(wants))
            fw.out = _positive(scalar_vector(out))
            self._wanting.add(framework_id)
        fw.smallest = _positive(scalar_vector(smallest)) if smallest and wants is not None else None
        self._floor_stale = True
        if fw.smallest:
            self._sized.add(framework_id)
        else:
            fw.smallest = None
            self._sized.discard(framework_id)
        self._resate(fw)
        if not fw.sated:
            # More wanted, or a smaller smallest task: agents passed over may be for it now.
            self._reopened.add(framework_id)

    def answered(self, framework_id: str, resources: Resources) -> None:
        """An offer to the framework ended (accepted, declined, rescinded): it no longer covers
        what the framework wants."""
        self._take_off(framework_id, "out", resources)

    def launched(self, framework_id: str, used: Resources) -> None:
        """The framework launched tasks using `used`: that much less is waiting."""
        self._take_off(framework_id, "wants", used)

    def _take_off(self, framework_id: str, which: str, resources: Resources) -> None:
        fw = self._frameworks.get(framework_id)
        if fw is None or fw.wants is None:
            return
        vec = getattr(fw, which)
        add_into(vec, scalar_vector(resources), -1)
        setattr(fw, which, _positive(vec))
        self._resate(fw)

    def wants_of(self, framework_id: str) -> tuple[Vector, Vector, Vector] | None:
        """(what the framework wants, what its unanswered offers hold, its smallest task), or
        None: no limit."""
        fw = self._frameworks.get(framework_id)
        if fw is None or fw.wants is None:
            return None
        return dict(fw.wants), dict(fw.out), dict(fw.smallest or {})

    def take_reopened(self) -> bool:
        """Whether a framework's offers stopped covering what it wants since the last call:
        then every agent may have something for it, not only those that changed."""
        if not self._reopened:
            return False  # every cycle asks: no new set each time
        reopened, self._reopened = self._reopened, set()
        frameworks = self._frameworks
        # Judged now, not when it happened: an Accept answers its offers (hungry again) and
        # launches (sated again) in one call, which needs no sweep of every agent.
        return any((fw := frameworks.get(f)) is not None and not fw.sated for f in reopened)

    def _resate(self, fw: _Framework) -> None:
        sated = fw.wants is not None and covers(fw.out, fw.wants)
        if sated != fw.sated:
            fw.sated = sated
            if not sated:
                self._reopened.add(fw.framework_id)
            self._sync_eligibility(fw)

    def _count_out(self, grants: list[OfferGrant], start: int) -> bool:
        """Adds the offers granted from `start` on to their frameworks' `out`; True if one of
        them is now sated (and so passed over from here on)."""
        sated = False
        frameworks = self._frameworks
        for grant in grants[start:]:
            fw = frameworks.get(grant.framework_id)
            if fw is None or fw.wants is None or grant.revocable:
                continue  # a met hold's offers count: the master answers them as any
            add_into(fw.out, scalar_vector(grant.resources), 1)
            if not fw.sated and covers(fw.out, fw.wants):
                fw.sated = sated = True
                self._sync_eligibility(fw)
        return sated

    # resources back -------------------------------------------------------------------------

    def recover(
        self,
        framework_id: str,
        agent_id: str,
        resources: Resources,
        now: float,
        refuse_seconds: float | None = None,
    ) -> None:
        """Resources allocated to a framework on an agent become free again.

        refuse_seconds > 0 also refuses them for that long (refuse()); None or 0 installs no
        filter. Recovering on a removed agent, or for a removed framework, is a no-op (their
        allocations were already dropped).
        """
        agent = self._agents.get(agent_id)
        if agent is not None and resources:
            held = agent.allocated.get(framework_id)
            if held is None:
                if framework_id not in self._frameworks and framework_id not in self._orphans:
                    return  # removed framework: already freed
                raise ValueError(
                    f"cannot recover {resources} for framework {framework_id} on agent "
                    f"{agent_id}: nothing is allocated to it there"
                )
            if not held.contains(resources):
                raise ValueError(
                    f"cannot recover {resources} for framework {framework_id} on agent "
                    f"{agent_id}: only {held} is allocated to it there"
                )
            self._set_allocation(framework_id, agent, held - resources)
        if refuse_seconds is not None:
            self.refuse(framework_id, agent_id, resources, now, refuse_seconds)

    def refuse(
        self, framework_id: str, agent_id: str, refused: Resources, now: float, seconds: float
    ) -> None:
        """A decline filter: until now + seconds (capped at 365 days) the agent's offers stay
        hidden from the framework while they are contained in `refused`, as in Mesos
        (filters.py); 0 installs none. It gives nothing back: an optimistic offer held nothing,
        and a declined held offer is recovered apart. A removed framework is ignored."""
        if framework_id not in self._frameworks:
            return
        if math.isnan(seconds):
            raise ValueError("refuse_seconds must be a number, got NaN")
        if seconds > 0:
            until = now + min(float(seconds), MAX_REFUSE_SECONDS)
            self._filters.add(framework_id, agent_id, until, refused)
            if (agent := self._agents.get(agent_id)) is not None:
                agent.visit_at = None  # the last cycle there did not know of this filter

    def decline(
        self,
        framework_id: str,
        agent_id: str,
        resources: Resources,
        now: float,
        refuse_seconds: float | None = None,
    ) -> None:
        """recover() for a declined offer: None means the configured default (Mesos' 5 s);
        the filter hides offers contained in the declined `resources`."""
        if refuse_seconds is None:
            refuse_seconds = self.config.default_refuse_seconds
        self.recover(framework_id, agent_id, resources, now, refuse_seconds)

    # roles ----------------------------------------------------------------------------------

    def set_weight(self, role: str, weight: float) -> None:
        """A role of weight 2 is offered as if its dominant share were half what it is."""
        r = self._role(role)
        self._role_sorter.set_weight(role, weight)
        r.weight = self._role_sorter.weight(role)
        self._maybe_drop_role(r)

    def set_quota(
        self, role: str, guarantee: Resources | None, limit: Resources | None = None
    ) -> None:
        """Sets a role's quota; an empty guarantee and no limit clears it."""
        quota = make_quota(guarantee, limit)
        r = self._role(role)
        r.quota = quota
        self._headroom_cache = None
        if quota is None:
            self._quota_roles.discard(role)
            self._maybe_drop_role(r)
        elif role not in self._quota_roles:
            tracking = bool(self._quota_roles)
            self._quota_roles.add(role)
            if not tracking:
                self._rebuild_pools()

    # the cycle ------------------------------------------------------------------------------

    def allocate(self, now: float, agent_ids: Iterable[str] | None = None) -> list[OfferGrant]:
        """One allocation cycle over the given agents (None: all); returns what it granted."""
        self._filters.expire(now)
        self._refresh_shares()
        grants: list[OfferGrant] = []
        self._hold_filling.new_cycle()
        if not self._holds and not any(r.eligible for r in self._roles.values()):
            # Nobody may be offered anything (no framework, or all suppressed): the master's
            # periodic sweep of an idle 10,000-agent cluster no longer visits every agent.
            return grants
        offer = self._policy.offer
        holds = self._holds
        fill_holds = self._hold_filling.fill
        lend = self._revocable.offer if self._revocable_frameworks else None
        wanting = self._wanting
        roles = self._roles.values()
        floor = self._offer_floor()
        agents: Iterable[_Agent]
        if agent_ids is not None:
            known = self._agents
            agents = [known[a] for a in dict.fromkeys(agent_ids) if a in known]
        elif floor and not holds and lend is None:
            # Only agents with the floor's cpus and mem free can pass it; holds and lending
            # visit every agent.
            agents = self._from_resume(self._sweep(floor))
        else:
            agents = self._from_resume(self._ring)
        for agent in agents:
            if agent.active and agent.free:
                if holds:
                    fill_holds(agent, now, grants)
                if agent.free and (floor is None or covers(agent.free_vec, floor)):
                    start = len(grants)
                    offer(agent, now, grants)
                    if (
                        wanting
                        and len(grants) > start
                        and self._count_out(grants, start)
                        and not holds
                        and lend is None
                        and not any(r.eligible for r in roles)
                    ):
                        # Every framework's offers now cover what it waits for: the rest of
                        # the agents have nobody to be offered to (a revive with a small
                        # demand visits a few agents, not 10,000).
                        if agent_ids is None:
                            self._resume = agent.seq
                        break
            if lend is not None and agent.active:  # what is left, and what holds sit on
                lend(agent, now, grants)
        if self._quota_roles:
            grants = _merge(grants)
        return grants

    def _offer_floor(self) -> Vector | None:
        """What an agent must have free for any framework in line to be offered it: per
        resource, the least of their smallest tasks (None: one said none, so any agent may
        do). An agent below it is passed over without asking the sorters, for each framework
        would find it TOO_SMALL: in a packed cluster most agents are scraps, and a sweep over
        10,000 of them is then a comparison each. Kept until eligibility or a smallest task
        changes (a framework sated within a cycle only raises it: the old one still holds)."""
        if self._floor_stale:
            self._floor = self._least_smallest() if self._sized else None
            self._floor_stale = False
        return self._floor

    def _least_smallest(self) -> Vector | None:
        floor: Vector | None = None
        for fw in self._frameworks.values():
            if not _eligible(fw):
                continue
            smallest = fw.smallest
            if not smallest:
                return None
            if floor is None:
                floor = dict(smallest)
            else:  # a resource one of them does not ask for bounds nothing
                floor = {n: min(v, smallest[n]) for n, v in floor.items() if n in smallest}
                if not floor:
                    return None
        return floor

    def next_wakeup(self) -> float | None:
        """The earliest expiry of a decline filter or of a refusal of lent room: when an
        allocation may offer something new."""
        refusals = self._revocable_refusals
        while refusals and not self._refusal_stands(*refusals[0]):
            heapq.heappop(refusals)  # revived, or its framework or agent gone
        filters = self._filters.next_expiry()
        lent = refusals[0][0] if refusals else None
        if filters is None or lent is None:
            return filters if lent is None else lent
        return min(filters, lent)

    def expire_filters(self, now: float) -> list[str]:
        """Drops the decline filters and refusals of lent room due by `now`; returns the
        agents where one ended, the only ones an expiry can make offerable (allocate() drops
        filters too, first thing)."""
        ended = set(self._filters.expire(now))
        refusals = self._revocable_refusals
        while refusals and refusals[0][0] <= now:
            until, agent_id, framework_id = heapq.heappop(refusals)
            if self._refusal_stands(until, agent_id, framework_id):
                del self._agents[agent_id].revocable_refused[framework_id]
                ended.add(agent_id)
        return sorted(a for a in ended if a in self._agents)

    def _refusal_stands(self, until: float, agent_id: str, framework_id: str) -> bool:
        agent = self._agents.get(agent_id)
        return agent is not None and agent.revocable_refused.get(framework_id) == until

    # optimistic offers ----------------------------------------------------------------------

    def withdraw(self, framework_id: str, agent_id: str, resources: Resources) -> None:
        """An optimistic offer ended (accepted, declined, rescinded): it no longer counts as
        offered to the framework on that agent. Nothing was held, so nothing is freed."""
        agent = self._agents.get(agent_id)
        if agent is None or framework_id not in agent.offered:
            return
        offered, since = agent.offered[framework_id]
        left = beyond(offered, resources)
        if left:
            agent.offered[framework_id] = (left, since)
        else:
            del agent.offered[framework_id]
            if (fw := self._frameworks.get(framework_id)) is not None:
                fw.offered_on.discard(agent_id)

    def commit(self, framework_id: str, agent_id: str, resources: Resources) -> None:
        """An optimistic Accept: `resources` move from free to the framework. ValueError if they
        are not all free (the caller checks first, to say what conflicts)."""
        agent = self._agents[agent_id]
        held = agent.allocated.get(framework_id, EMPTY)
        self._set_allocation(framework_id, agent, held + resources)

    # revocable resources (revocable.py) ---------------------------------------------------

    def use_revocable(self, framework_id: str, agent_id: str, used: Resources) -> None:
        """A revocable offer was accepted: it ends, and its tasks use `used` (or, at a
        re-registration, tasks on revocable resources are reported: `used` is theirs)."""
        agent = self._agents.get(agent_id)
        if agent is None:
            return
        agent.revocable_offered.pop(framework_id, None)
        if used:
            agent.revocable[framework_id] = agent.revocable.get(framework_id, EMPTY) + used

    def lends_on(self, agent_id: str) -> bool:
        """Whether anything is lent on the agent now (a revocable offer or task there)."""
        agent = self._agents.get(agent_id)
        return agent is not None and bool(agent.revocable or agent.revocable_offered)

    def set_revocable(self, framework_id: str, agent_id: str, used: Resources) -> None:
        """What the framework's tasks on revocable resources use on the agent, all told (the
        master's books after a re-registration or a framework's return: set, not added, so
        that either order books them once)."""
        agent = self._agents.get(agent_id)
        if agent is None:
            return
        if used:
            agent.revocable[framework_id] = used
        else:
            agent.revocable.pop(framework_id, None)

    def refuse_revocable(self, framework_id: str, agent_id: str, until: float) -> None:
        """A declined revocable offer: nothing is lent to the framework on the agent until
        then. Apart from its decline filters, which it must not touch: refusing what is lent
        must not hide the ordinary offers of that agent, nor the reverse."""
        agent = self._agents.get(agent_id)
        if agent is not None and framework_id in self._frameworks:
            agent.revocable_refused[framework_id] = until
            heapq.heappush(self._revocable_refusals, (until, agent_id, framework_id))

    def withdraw_revocable(self, framework_id: str, agent_id: str) -> None:
        """A revocable offer ended unused (declined, rescinded, timed out)."""
        agent = self._agents.get(agent_id)
        if agent is not None:
            agent.revocable_offered.pop(framework_id, None)

    def recover_revocable(self, framework_id: str, agent_id: str, resources: Resources) -> None:
        """A task on revocable resources ended: they are no longer in use."""
        agent = self._agents.get(agent_id)
        held = agent.revocable.get(framework_id) if agent is not None else None
        if agent is None or held is None:
            return
        left = beyond(held, resources)
        if left:
            agent.revocable[framework_id] = left
        else:
            del agent.revocable[framework_id]

    def quota_room(self, framework_id: str, resources: Resources) -> str | None:
        """Why the framework's role may not take `resources` now (its quota limit, or headroom
        held back for other roles' guarantees), or None. Optimistic offers hold nothing, so the
        caps their offers were cut to may be spent by the time one is accepted: the commit
        checks again."""
        if not self._quota_roles:
            return None
        fw = self._frameworks[framework_id]
        caps = self._caps(self._roles[fw.role], False)
        if not caps:
            return None
        wanted = scalar_vector(resources.unreserved())
        over = {n: v for n, v in wanted.items() if n in caps and v > caps[n]}
        if not over:
            return None
        room = ", ".join(f"{n} {caps[n] / MILLI:g}" for n in sorted(over))
        return f"role {fw.role!r} may take only {room} more now (quota limit or headroom)"

    def fair_share(self, framework_id: str) -> float:
        """The framework's fair share of the cluster (optimistic.fair_shares)."""
        return self._fair_shares(framework_id).get(framework_id, 0.0)

    def priority_rival(
        self, framework_id: str, agent_id: str, resources: Resources, now: float, grace: float
    ) -> Rival | None:
        """The framework below its fair share whose recent offer on `agent_id` an Accept of
        `resources` by `framework_id` would break, if the fairness rule gives it priority
        (optimistic.py); None when the Accept may commit."""
        agent = self._agents[agent_id]
        if not any(fid != framework_id for fid in agent.offered):
            return None
        self._refresh_shares()
        inv = self._inv_total
        fairs = self._fair_shares(framework_id)
        after = dict(self._frameworks[framework_id].vec)
        add_into(after, scalar_vector(resources))
        left = agent.free - resources
        rivals = [
            Rival(
                framework_id=fid,
                share=dominant_share(self._frameworks[fid].vec, inv),
                fair_share=fairs.get(fid, 0.0),
                offered_at=since,
                broken=not left.contains(offered),
            )
            for fid, (offered, since) in agent.offered.items()
            # A rival the rule now keeps from this agent (its capabilities changed) may not
            # take what it was offered here: it has no claim to protect.
            if fid != framework_id
            and fid in self._frameworks
            and not barred(self._frameworks[fid].gpu, agent.gpus)
        ]
        return priority_rival(
            dominant_share(after, inv), fairs.get(framework_id, 0.0), rivals, now, grace
        )

    def _fair_shares(self, asking: str) -> dict[str, float]:
        frameworks = self._frameworks

        def counts(f: str, r: _Role) -> bool:
            # Out of the sorter while its offers cover its want, but still wanting: it counts.
            fw = frameworks[f]
            return (
                f == asking
                or r.sorter.is_active(f)
                or (fw.sated and fw.active and not fw.suppressed)
            )

        roles = {
            name: (r.weight, [f for f in r.frameworks if counts(f, r)])
            for name, r in self._roles.items()
        }
        return fair_shares(roles)

    # holds ----------------------------------------------------------------------------------

    def add_hold(
        self,
        hold_id: str,
        framework_id: str,
        count: int,
        size: Resources,
        distinct: bool,
        deadline: float,
    ) -> Hold:
        """Starts collecting resources for a framework (holds.py). HoldRefused when the shape
        could never fit the cluster or would take the framework above its fair share."""
        fw = self._frameworks.get(framework_id)
        if fw is None:
            raise HoldRefused(f"framework {framework_id} is unknown to the allocator")
        if count < 1:
            raise HoldRefused(f"count must be at least 1, got {count}")
        if size.ranges or not size:
            raise HoldRefused(
                f"a hold's task size takes scalar resources (cpus, mem, ...), got {size or '{}'}"
            )
        fits = 0
        for agent in self._agents.values():
            if agent.active and not barred(fw.gpu, agent.gpus):
                fits += slots(agent.total.unreserved(), size, 1 if distinct else count)
        if fits < count:
            where = "distinct agents" if distinct else "the cluster's agents"
            raise HoldRefused(
                f"{count} tasks of {size} can never fit: {where} hold at most {fits} even "
                "when empty; ask for fewer or smaller tasks"
            )
        self._refresh_shares()
        wanted = scalar_vector(times(size, count))
        share = dominant_share(wanted, self._inv_total)
        fair = self.fair_share(framework_id)
        quota = self._roles[fw.role].quota if fw.role in self._roles else None
        # A gang within its role's quota guarantee is owed, whatever the fair shares say.
        owed = quota is not None and all(
            wanted.get(name, 0) <= amount for name, amount in quota.guarantee.items()
        )
        if share > fair + 1e-9 and not owed:
            raise HoldRefused(
                f"{count} x {size} is a dominant share of {share:.3f} of the cluster, above "
                f"framework {framework_id}'s fair share {fair:.3f}: a hold may never take "
                "more (but its role's quota guarantee); ask for fewer or smaller tasks"
            )
        hold = Hold(hold_id, framework_id, count, size, distinct, deadline)
        self._holds[hold_id] = hold
        return hold

    def release_hold(self, hold_id: str) -> Hold | None:
        """Ends a hold that is still collecting; what it took becomes free again."""
        hold = self._holds.pop(hold_id, None)
        if hold is None:
            return None
        for agent_id, (taken, _) in hold.taken.items():
            agent = self._agents.get(agent_id)
            if agent is not None:
                self._give_back(hold, agent, taken)
        return hold

    def _give_back(self, hold: Hold, agent: _Agent, taken: Resources) -> None:
        """What `hold` took on `agent` is no longer its framework's: free again."""
        held = agent.allocated.get(hold.framework_id, EMPTY)
        self._set_allocation(hold.framework_id, agent, beyond(held, taken))

    def expire_holds(self, now: float) -> list[Hold]:
        """Releases the holds past their deadline; returns them."""
        due = [h.hold_id for h in self._holds.values() if h.deadline <= now]
        return [hold for hold_id in due if (hold := self.release_hold(hold_id)) is not None]

    def holds_of(self, framework_id: str) -> list[Hold]:
        return [h for h in self._holds.values() if h.framework_id == framework_id]

    def hold(self, hold_id: str) -> Hold | None:
        return self._holds.get(hold_id)

    # reading --------------------------------------------------------------------------------

    def dominant_share(self, framework_id: str) -> float:
        self._refresh_shares()
        return dominant_share(self._frameworks[framework_id].vec, self._inv_total)

    def role_share(self, role: str) -> float:
        self._refresh_shares()
        return dominant_share(self._roles[role].vec, self._inv_total)

    def free(self, agent_id: str) -> Resources:
        return self._agents[agent_id].free

    def agent_allocations(self, agent_id: str) -> dict[str, Resources]:
        """framework_id -> resources allocated on the agent (offered or in use)."""
        return dict(self._agents[agent_id].allocated)

    def framework_allocations(self, framework_id: str) -> dict[str, Resources]:
        """agent_id -> resources allocated to the framework (offered or in use)."""
        return dict(self._frameworks[framework_id].allocated)

    def framework_order(self) -> list[str]:
        """Frameworks that may get offers, in the order the next cycle would visit them."""
        self._refresh_shares()
        out = []
        for role in self._role_sorter.order():
            out.extend(self._roles[role].sorter.order())
        return out

    def role_summaries(self) -> list[dict]:
        """One dict per role for the Operator API: weight, quota, allocation, shares."""
        self._refresh_shares()
        out = []
        for name in sorted(self._roles):
            r = self._roles[name]
            share = dominant_share(r.vec, self._inv_total)
            out.append(
                {
                    "role": name,
                    "weight": r.weight,
                    "guarantee": vector_resources(r.quota.guarantee) if r.quota else EMPTY,
                    "limit": (
                        vector_resources(r.quota.limit)
                        if r.quota is not None and r.quota.limit is not None
                        else None
                    ),
                    "allocated": vector_resources(r.vec),
                    "consumed": vector_resources(self._consumption(r)),
                    "headroom": self._headroom_of(r),
                    "dominant_share": share,
                    "weighted_share": share / r.weight,
                    "frameworks": sorted(r.frameworks),
                }
            )
        return out

    def _headroom_of(self, role: _Role) -> Resources:
        """What the role still lacks of its quota guarantee: free unreserved resources up to
        this much are held back from every other role for it (empty when it lacks nothing)."""
        quota = role.quota
        if quota is None or not quota.guarantee:
            return EMPTY
        return vector_resources(quota.unmet(self._consumption(role)))

    def explain(self, framework_id: str, now: float) -> list[str]:
        """Why the framework is getting no offers right now, one reason per line."""
        from agora.master.allocator.explain import explain

        self._refresh_shares()
        return explain(self.view(), framework_id, now)

    def view(self) -> AllocatorView:
        """A read-only view of this allocator's state (for explanations and reports)."""
        return AllocatorView(self)

    def preemption_roles(self):
        """Roles (weight, guarantee, allocation) and the total, for preemption."""
        return self.view().preemption_roles()

    def preemption_free(self):
        """Free vectors per active agent, for preemption's decisions."""
        return self.view().preemption_free()

    def preemption_room(self, roles):
        """Per role named, what it could be offered on each active agent (preemption)."""
        return self.view().preemption_room(roles)

    # internals: the per-agent step ----------------------------------------------------------

    def _role_offer(
        self, agent: _Agent, role: _Role, guarantee_stage: bool, caps: Vector | None = None
    ) -> tuple[Resources | None, Vector]:
        """What the agent may offer any framework of `role` now, or None if below the minimum.
        `caps`: the role's `_caps`, when the caller reads many agents for one role at once."""
        offer = agent.free_for(role.name)
        if self._quota_roles:
            if caps is None:
                caps = self._caps(role, guarantee_stage)
            if caps:
                offer = cap_unreserved(offer, caps)
        vec = agent.free_vec if offer is agent.free else scalar_vector(offer)
        if not offer or not self._fits_min(vec):
            return None, vec
        return offer, vec

    def _caps(self, role: _Role, guarantee_stage: bool) -> Vector:
        """Upper bounds on the unreserved scalars a role may take now (quota limit, headroom)."""
        quota = role.quota
        consumed = self._consumption(role) if quota is not None else {}
        bounds = []
        if quota is not None and quota.limit is not None:
            bounds.append({n: max(0, cap - consumed.get(n, 0)) for n, cap in quota.limit.items()})
        if guarantee_stage:
            if quota is not None:
                bounds.append(
                    {n: max(0, g - consumed.get(n, 0)) for n, g in quota.guarantee.items()}
                )
        else:
            own = quota.unmet(consumed) if quota is not None else {}
            required = self._required_headroom()
            if required:
                # A role below its guarantee may use what is held back for it.
                bounds.append(
                    {
                        n: max(0, self._free_unreserved.get(n, 0) - req + own.get(n, 0))
                        for n, req in required.items()
                    }
                )
        return min_caps(*bounds)

    def _required_headroom(self) -> Vector:
        if self._headroom_cache is None:
            self._headroom_cache = required_headroom(
                quota.unmet(self._consumption(r))
                for r in (self._roles[n] for n in self._quota_roles)
                if (quota := r.quota) is not None and quota.guarantee
            )
        return self._headroom_cache

    def _consumption(self, role: _Role) -> Vector:
        """Counted against quota: allocated plus unallocated reservations (as Mesos 1.9+)."""
        if self._quota_roles:
            reserved = self._free_reserved.get(role.name)
        else:  # the pools are not kept without quota: count (for summaries and explain only)
            reserved = {}
            for agent in self._agents.values():
                if agent.reserved:
                    add_into(reserved, scalar_vector(agent.free.reserved(role.name)))
        if not reserved:
            return role.vec
        out = dict(role.vec)
        add_into(out, reserved)
        return out

    def _fits_min(self, vec: Mapping[str, float]) -> bool:
        mins = self._min
        if not mins:
            return True
        for m in mins:
            for name, amount in m.items():
                if vec.get(name, 0) < amount:
                    break
            else:
                return True
        return False

    def _grant(
        self,
        fw: _Framework,
        role: _Role,
        agent: _Agent,
        offer: Resources,
        vec: Vector,
        grants: list[OfferGrant],
    ) -> None:
        fid = fw.framework_id
        agent_id = agent.agent_id
        prev = agent.allocated.get(fid)
        new = offer if prev is None else prev + offer
        agent.allocated[fid] = new
        fw.allocated[agent_id] = new
        if offer is agent.free:
            self._free_contribution(agent, -1)
            agent.free = EMPTY
            agent.free_vec = {}
            agent.reserved = False
            self._relevel(agent)
        else:
            self._set_free(agent, agent.free - offer)
        self._account(fw, vec, 1, role)
        grants.append(OfferGrant(fid, agent_id, offer))

    # internals: bookkeeping -----------------------------------------------------------------

    def _set_allocation(self, framework_id: str, agent: _Agent, new: Resources) -> None:
        """Sets what a framework holds on an agent, moving the difference to or from free."""
        old = agent.allocated.get(framework_id, EMPTY)
        if new == old:
            return
        free = agent.free + old if old else agent.free
        if not free.contains(new):
            raise ValueError(
                f"agent {agent.agent_id} cannot allocate {new} to framework {framework_id}: "
                f"only {free} is free"
            )
        if new:
            agent.allocated[framework_id] = new
        else:
            agent.allocated.pop(framework_id, None)
        fw = self._frameworks.get(framework_id)
        if fw is not None:
            if new:
                fw.allocated[agent.agent_id] = new
            else:
                fw.allocated.pop(agent.agent_id, None)
            delta = scalar_vector(new)
            add_into(delta, scalar_vector(old), -1)
            self._account(fw, delta, 1)
        elif new:
            self._orphans.setdefault(framework_id, set()).add(agent.agent_id)
        else:
            orphans = self._orphans.get(framework_id)
            if orphans is not None:
                orphans.discard(agent.agent_id)
                if not orphans:
                    del self._orphans[framework_id]
        self._set_free(agent, free - new)

    def _set_free(self, agent: _Agent, free: Resources) -> None:
        self._free_contribution(agent, -1)
        agent.free = free
        vec: Vector = {}
        reserved = False
        for (name, role), value in free.scalars.items():
            vec[name] = vec.get(name, 0) + round(value * MILLI)
            if role != UNRESERVED:
                reserved = True
        if not reserved:
            for _name, role in free.ranges:
                if role != UNRESERVED:
                    reserved = True
        agent.free_vec = vec
        agent.reserved = reserved
        self._relevel(agent)
        self._free_contribution(agent, 1)

    def _relevel(self, agent: _Agent) -> None:
        """Files the agent under its free cpus and mem (_by_level, and _rooms)."""
        self._changes += 1
        free, filed = agent.free_vec, agent.levels
        for name in _INDEXED:
            level = free.get(name, 0)
            old = filed.get(name)
            if level == old:
                continue
            by_level = self._by_level[name]
            if old is not None:
                self._unfile(name, old, agent.agent_id)
            bucket = by_level.get(level)
            if bucket is None:
                bucket = by_level[level] = {}
                bisect.insort(self._levels[name], level)
            bucket[agent.agent_id] = agent
            filed[name] = level
        for room in self._rooms.values():
            room.update(agent)

    def _unfile(self, name: str, level: int, agent_id: str) -> None:
        """Takes the agent out of its level; a level left empty goes (free mem is filed in
        thousandths of a MB: levels seen once would otherwise pile up)."""
        by_level = self._by_level[name]
        bucket = by_level[level]
        bucket.pop(agent_id, None)
        if not bucket:
            del by_level[level]
            levels = self._levels[name]
            del levels[bisect.bisect_left(levels, level)]

    def _from_resume(self, agents: list[_Agent]) -> Iterable[_Agent]:
        """`agents` (in the order they joined) from the first after where the last sweep
        stopped early, then round from the start. A sweep stops once every framework's offers
        cover its want; the next one starting over at the first agent would walk again past
        every agent that the last offered and its framework declined (a decline filter hides
        it for seconds): at 100,000 agents, tens of thousands a cycle, for one grant. Mesos
        shuffles its agents every cycle for the same reason; a rotation visits each agent
        once before any agent twice."""
        start = bisect.bisect_right(agents, self._resume, key=_seq)
        if start in (0, len(agents)):
            return agents
        return chain(
            map(agents.__getitem__, range(start, len(agents))),
            map(agents.__getitem__, range(start)),
        )

    def _sweep(self, floor: Vector) -> list[_Agent]:
        """The agents a sweep with this floor visits, in the order they joined: where a
        sixteenth of the agents or fewer have its cpus free, or its mem, a copy of those with
        both, kept from one cycle to the next as amounts change (_Room; the lists of the last
        few floors are kept, as long as they stay that short); else every agent
        (the ring, which changes only as agents come and go). The cycle checks the whole
        floor on each."""
        cpus, mem = floor.get("cpus", 0), floor.get("mem", 0)
        count = len(self._agents)
        rooms = self._rooms
        for key, kept in list(rooms.items()):
            if len(kept.agents) * _SPARSE > count:  # most have room now: no list to keep up
                del rooms[key]
                self._set_dense(*key, len(kept.agents) - count // _SPARSE)
        room = rooms.get((cpus, mem))
        if room is not None:
            return room.agents[:]  # a copy: the list changes as the cycle grants
        until = self._dense.get((cpus, mem))
        if until is not None and self._changes < until:
            return self._ring  # too few changes since to have made them few
        # Those with the floor's cpus free, or its mem, whichever are fewer, bound them: a sum
        # over the levels, no agent visited. Cpus first: mem has thousands of levels at
        # 100,000 agents (filed in thousandths), summed only when cpus leave it open.
        best: list[dict[str, _Agent]] | None = None
        fewest = count + 1
        for name in _INDEXED:
            if not floor.get(name) or fewest * _SPARSE <= count:
                continue
            levels, by_level = self._levels[name], self._by_level[name]
            buckets = [by_level[v] for v in levels[bisect.bisect_left(levels, floor[name]) :]]
            bound = sum(map(len, buckets))
            if bound < fewest:
                best, fewest = buckets, bound
        if best is None or fewest * _SPARSE > count:
            self._set_dense(cpus, mem, fewest - count // _SPARSE)
            return self._ring
        self._dense.pop((cpus, mem), None)
        if len(rooms) >= _ROOMS:
            del rooms[next(iter(rooms))]  # the oldest floor's
        room = rooms[(cpus, mem)] = _Room(cpus, mem)
        found = room.agents
        found.extend(a for b in best for a in b.values() if room.fits(a))
        found.sort(key=_seq)
        return found[:]

    def _set_dense(self, cpus: int, mem: int, margin: int) -> None:
        """Too many agents have the floor (cpus, mem) free, by `margin`: as many changes must
        pass before a sweep asks again."""
        if len(self._dense) >= 64:
            self._dense.clear()  # floors seen once: forgotten, not piled up
        self._dense[(cpus, mem)] = self._changes + margin

    def _free_contribution(self, agent: _Agent, sign: int) -> None:
        """Adds (or removes) an agent's free scalars to the headroom and reservation pools."""
        if not self._quota_roles:
            return  # the pools serve quota only; set_quota rebuilds them
        free_reserved = self._free_reserved
        unreserved = self._free_unreserved
        active = agent.active
        for (name, role), value in agent.free.scalars.items():
            if role == UNRESERVED:
                if active:
                    unreserved[name] = unreserved.get(name, 0) + sign * round(value * MILLI)
            else:
                pool = free_reserved.get(role)
                if pool is None:
                    pool = free_reserved[role] = {}
                pool[name] = pool.get(name, 0) + sign * round(value * MILLI)
                self._headroom_cache = None

    def _rebuild_pools(self) -> None:
        self._free_unreserved = {}
        self._free_reserved = {}
        self._headroom_cache = None
        for agent in self._agents.values():
            self._free_contribution(agent, 1)

    def _account(
        self, fw: _Framework, vec: Mapping[str, int], sign: int, role: _Role | None = None
    ) -> None:
        """Adds an allocation change to the framework's and role's totals and their shares."""
        if role is None:
            role = self._roles[fw.role]
        if role.quota is not None:
            self._headroom_cache = None
        fv = fw.vec
        rv = role.vec
        for name, amount in vec.items():
            fv[name] = fv.get(name, 0) + sign * amount
            rv[name] = rv.get(name, 0) + sign * amount
        if not self._shares_dirty:
            inv = self._inv_total
            role.sorter.update(fw.framework_id, dominant_share(fv, inv))
            self._role_sorter.update(role.name, dominant_share(rv, inv))

    def _refresh_shares(self) -> None:
        if not self._shares_dirty:
            return
        inv = self._inv_total = inverse_totals(self._total)
        for r in self._roles.values():
            for fid in r.frameworks:
                r.sorter.update(fid, dominant_share(self._frameworks[fid].vec, inv))
            self._role_sorter.update(r.name, dominant_share(r.vec, inv))
        self._shares_dirty = False

    def _role(self, name: str) -> _Role:
        r = self._roles.get(name)
        if r is None:
            r = _Role(name, make_sorter(self.config.framework_sorter, self.config.seed))
            self._roles[name] = r
            self._role_sorter.add(name)
            self._role_sorter.update(name, dominant_share(r.vec, self._inv_total))
        return r

    def _maybe_drop_role(self, r: _Role) -> None:
        if not r.frameworks and r.weight == 1.0 and r.quota is None:
            self._role_sorter.remove(r.name)
            del self._roles[r.name]

    def _sync_eligibility(self, fw: _Framework) -> None:
        role = self._roles[fw.role]
        eligible = _eligible(fw)
        self._floor_stale = True
        was = role.sorter.is_active(fw.framework_id)
        if eligible and not was:
            role.sorter.activate(fw.framework_id)
            role.eligible += 1
            if role.eligible == 1:
                self._role_sorter.activate(role.name)
        elif was and not eligible:
            role.sorter.deactivate(fw.framework_id)
            role.eligible -= 1
            if role.eligible == 0:
                self._role_sorter.deactivate(role.name)


_INDEXED = ("cpus", "mem")  # what _by_level files agents by
_SPARSE = 16  # _sweep keeps a list of the agents with room while they are 1/16 or fewer
_ROOMS = 4  # and such lists for this many floors at most


class _Room:
    """The agents whose free cpus and mem reach a floor's, in the order they joined, kept
    as their free amounts change. A sweep with that floor visits these alone; a list built
    and sorted every cycle cost a 100,000-agent cycle milliseconds where its sweep then
    stopped after a few agents."""

    __slots__ = ("cpus", "mem", "agents")

    def __init__(self, cpus: int, mem: int) -> None:
        self.cpus, self.mem = cpus, mem
        self.agents: list[_Agent] = []

    def fits(self, agent: _Agent) -> bool:
        free = agent.free_vec
        return free.get("cpus", 0) >= self.cpus and free.get("mem", 0) >= self.mem

    def update(self, agent: _Agent) -> None:
        """In the list if it has the room now, out if not."""
        i, there = self._find(agent)
        if self.fits(agent):
            if not there:
                self.agents.insert(i, agent)
        elif there:
            del self.agents[i]

    def discard(self, agent: _Agent) -> None:
        i, there = self._find(agent)
        if there:
            del self.agents[i]

    def _find(self, agent: _Agent) -> tuple[int, bool]:
        """Where the agent is, or would go, in the list (by seq), and whether it is there."""
        agents = self.agents
        i = bisect.bisect_left(agents, agent.seq, key=_seq)
        return i, i < len(agents) and agents[i] is agent


def _eligible(fw: _Framework) -> bool:
    """Whether the framework is in line for offers (its role's sorter holds it)."""
    return fw.active and fw.suppressed is False and not fw.sated


def _seq(agent: _Agent) -> int:
    return agent.seq


def _positive(vec: Vector) -> Vector:
    return {name: amount for name, amount in vec.items() if amount > 0}


def _merge(grants: list[OfferGrant]) -> list[OfferGrant]:
    """One grant per (framework, agent): stage 1 and stage 2 may both offer the same pair. A
    met hold's grants stay apart (they name the hold)."""
    merged: dict[tuple[str, str], Resources] = {}
    apart = []
    for g in grants:
        if g.hold_id or not g.exclusive:
            apart.append(g)
            continue
        key = (g.framework_id, g.agent_id)
        merged[key] = merged[key] + g.resources if key in merged else g.resources
    if not apart and len(merged) == len(grants):
        return grants  # nothing merged: keep the cycle's order
    return [OfferGrant(fid, aid, res) for (fid, aid), res in merged.items()] + apart
