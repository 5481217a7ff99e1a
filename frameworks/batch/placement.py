"""Placing waiting instances into one round of offers, gang jobs all-or-nothing. Pure.

Jobs come in queue order. A plain job places as many of its ready instances as fit; a gang job
places all of its instances in this round or none of them (its trial placements are rolled
back), and later jobs may still use what it could not (backfill).

A job's instances all need the same resources, so once one fits nowhere the rest do not either:
a group's wants are read lazily and no further than that, and a round of offers costs what it
places, not what waits (a 10,000-instance job builds a few task specs per offer, not 10,000).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from agora.common import UNRESERVED, Resources
from agora.common.task_limits import MAX_TASKS_PER_ACCEPT
from agora.frameworks.batch.backfill import Reservation
from agora.frameworks.sdk import OfferPacker, TaskSpec
from agora.frameworks.sdk.constraints import AgentFacts, Constraint, first_violation
from agora.v1 import common_pb2


@dataclass(frozen=True)
class Want:
    """One instance to place: `spec.task_id` is the task id it will launch as."""

    job_id: str
    index: int
    spec: TaskSpec


@dataclass
class Group:
    """The ready instances of one job, in the order the queue serves jobs. `wants` may be lazy
    (read once, no further than the first that fits nowhere); they share one shape."""

    job_id: str
    wants: Iterable[Want]
    gang: bool = False
    constraints: Sequence[Constraint] = ()
    # The agents the job's live instances run on, one entry per instance (UNIQUE, MAX_PER).
    placed: Sequence[AgentFacts] = ()
    gpus: bool = False  # its instances ask for GPUs: only they may use a GPU agent
    owner: str = ""  # whose job: owners share the offers by weighted DRF (FairShare)


@dataclass
class AgentLaunch:
    """What to launch on one agent, and from which offers."""

    agent_id: str
    offers: list[common_pb2.Offer]
    tasks: list[common_pb2.TaskInfo]
    wants: list[Want]


@dataclass
class Plan:
    launches: list[AgentLaunch]
    unused: list[common_pb2.Offer]  # offers on agents that got nothing
    placed: int = 0
    waiting: list[str] = field(default_factory=list)  # job ids with instances left unplaced
    # Of those, the ones whose next instance would have fit the round's offers had the jobs
    # ahead of them in the queue not taken them (their pending reason is PRIORITY).
    behind: set[str] = field(default_factory=set)
    # Of those, the ones whose next instance had room on some agent but broke its constraints
    # there: job id -> the first constraint it broke, in words.
    constrained: dict[str, str] = field(default_factory=dict)
    # Of the `behind` ones, those whose owner ended the round above another owner's share
    # (the room went to owners further below their share: pending reason OWNER_SHARE).
    owner_share: set[str] = field(default_factory=set)


@dataclass
class FairShare:
    """What owner fairness needs (weighted DRF between the owners of the jobs): what each
    owner's running instances use, each owner's weight (1 unless set), and the total the
    shares are of (the round's offers and what the framework's tasks hold)."""

    used: dict[str, dict[str, float]]
    weights: dict[str, float]
    total: dict[str, float]

    def share(self, owner: str) -> float:
        """The owner's dominant share over its weight."""
        used = self.used.get(owner, {})
        dominant = max(
            (amount / self.total[r] for r, amount in used.items() if self.total.get(r)),
            default=0.0,
        )
        return dominant / self.weights.get(owner, 1.0)

    def add(self, owner: str, spec: TaskSpec) -> None:
        used = self.used.setdefault(owner, {})
        for name, amount in spec.scalars().items():
            used[name] = used.get(name, 0.0) + amount


def plan(
    offers: Sequence[common_pb2.Offer],
    groups: Sequence[Group],
    role: str = UNRESERVED,
    facts: dict[str, AgentFacts] | None = None,
    fair: FairShare | None = None,
    reservation: Reservation | None = None,
    now: float = 0.0,
) -> Plan:
    """Places the groups into the offers; agents take turns so that a job spreads out.
    `facts`: the hostname and attributes of agents, for constraints (the offers' own when
    not given; GROUP_BY counts the values of all agents given). With `fair` and jobs of
    several owners, the owners take turns instance by instance, the lowest weighted dominant
    share first (DRF), each serving its own jobs in queue order. With `reservation`
    (backfill.py), other jobs use the reserved agent only as it allows at `now`."""
    round_ = _Round(offers, role, facts, reservation, now)
    if fair is None or len({g.owner for g in groups}) < 2:
        for group in groups:
            round_.place_group(group)
    else:
        round_.place_fairly(groups, fair)
    return round_.result()


@dataclass
class _GroupState:
    group: Group
    # Agent index -> (its packer's remaining, its tasks, its wants) before the group's first
    # placement there: only the agents it changed, so that a group costs nothing per agent
    # it does not use (a round may hold 100,000 agents' offers).
    saved: dict[int, tuple[Resources, int, int]]
    saved_start: int
    placed_before: bool  # something of an earlier group was placed in this round
    most_at_start: dict[str, float]  # the most any agent had left of each resource then
    where: list[AgentFacts]
    values: dict[str, set[str]] | None
    broke: str = ""


class _Round:
    """One round of offers being filled: the packers per agent and what each took."""

    def __init__(
        self,
        offers: Sequence[common_pb2.Offer],
        role: str,
        facts: dict[str, AgentFacts] | None,
        reservation: Reservation | None = None,
        now: float = 0.0,
    ) -> None:
        self.reservation, self.now = reservation, now
        by_agent: dict[str, list[common_pb2.Offer]] = {}
        for offer in offers:
            by_agent.setdefault(offer.agent_id, []).append(offer)
        self.facts = facts
        self.packers = [OfferPacker(group, role) for group in by_agent.values()]
        self.agents = [
            (facts or {}).get(p.agent_id) or offer_facts(p.offers[0]) for p in self.packers
        ]
        self.gpu_agents = {i for i, p in enumerate(self.packers) if p.remaining.scalar("gpus") > 0}
        self.placed: list[list[Want]] = [[] for _ in self.packers]
        self.placed_count = 0  # wants placed in the round so far
        self.room = _Most(self.packers)
        self.most_offered = self.room.most()
        self.offered = [p.remaining for p in self.packers]  # before any placement
        self.waiting: list[str] = []
        self.behind: set[str] = set()
        self.constrained: dict[str, str] = {}
        self.owner_share: set[str] = set()
        self.left: dict[str, Want] = {}  # job id -> its first instance that fit nowhere
        self.start = 0

    def place_group(self, group: Group) -> None:
        """Places the group's wants until one fits nowhere (the rest are the same shape)."""
        state = self.begin(group)
        for want in group.wants:
            if not self.place_one(state, want):
                self.end(state, want)
                return
        self.end(state, None)

    def place_fairly(self, groups: Sequence[Group], fair: FairShare) -> None:
        queues: dict[str, deque[Group]] = {}
        for group in groups:
            queues.setdefault(group.owner, deque()).append(group)
        turns = [(fair.share(owner), n, owner) for n, owner in enumerate(queues)]
        heapq.heapify(turns)
        states: dict[int, tuple[_GroupState, Iterator[Want]]] = {}
        while turns:
            _, n, owner = heapq.heappop(turns)
            queue = queues[owner]
            group = queue[0]
            if group.gang:  # all or nothing: placed as one turn
                before = self.placed_count
                self.place_group(group)
                if self.placed_count > before:
                    for want in _wants_of(self.placed, group.job_id):
                        fair.add(owner, want.spec)
                queue.popleft()
            else:
                state, wants = states.get(id(group)) or (self.begin(group), iter(group.wants))
                states[id(group)] = (state, wants)
                following = next(wants, None)
                if following is None:
                    self.end(state, None)
                    queue.popleft()
                elif self.place_one(state, following):
                    fair.add(owner, following.spec)
                else:
                    self.end(state, following)
                    queue.popleft()
            if queue:
                heapq.heappush(turns, (fair.share(owner), n, owner))
        # Owners took turns, so a job left waiting where room was offered lost it to another
        # owner's turn (its owner had reached the others' share: OWNER_SHARE) or to its own
        # owner's jobs ahead of it (PRIORITY).
        by_job = {g.job_id: g for g in groups}
        shares = {owner: fair.share(owner) for owner in queues}
        took = {w.job_id for wants in self.placed for w in wants}
        takers = {by_job[j].owner for j in took if j in by_job}
        for job_id, left in self.left.items():
            if job_id in self.constrained:
                continue
            self.behind.discard(job_id)
            group = by_job[job_id]
            skip = set() if group.gpus else self.gpu_agents
            if not _fits_any(self.packers, self.offered, left.spec, skip):
                continue  # no room was offered for it at all: RESOURCES
            mine = shares[group.owner]
            if any(shares[o] <= mine for o in takers if o != group.owner):
                self.owner_share.add(job_id)
            else:
                self.behind.add(job_id)

    def begin(self, group: Group) -> _GroupState:
        return _GroupState(
            group,
            saved={},
            saved_start=self.start,
            placed_before=self.placed_count > 0,
            most_at_start=self.room.most(),
            where=list(group.placed),  # the job's instances: live ones, then this round's
            values=_known_values(group.constraints, self.facts, self.agents),
        )

    def place_one(self, state: _GroupState, want: Want) -> bool:
        group, packers = state.group, self.packers
        if not self.room.may_fit(want.spec):
            return False  # no agent has room for it: no need to try each (next-fit's cost)
        for step in range(len(packers)):
            i = (self.start + step) % len(packers)
            if i in self.gpu_agents and not group.gpus:
                continue
            if len(packers[i].tasks) >= MAX_TASKS_PER_ACCEPT:
                continue  # one Accept launches at most that many: the rest wait a round
            if self.reservation is not None and self._reserved_from(group, i, want):
                continue
            if group.constraints:
                why = first_violation(group.constraints, self.agents[i], state.where, state.values)
                if why is not None:
                    state.broke = state.broke or (why if packers[i].fits(want.spec) else "")
                    continue
            packer = packers[i]
            remaining = packer.remaining
            if packer.pack(want.spec) is not None:
                if i not in state.saved:
                    state.saved[i] = (remaining, len(packer.tasks) - 1, len(self.placed[i]))
                self.placed[i].append(want)
                self.placed_count += 1
                self.room.changed(i)
                state.where.append(self.agents[i])
                self.start = i + 1
                return True
        return False

    def _reserved_from(self, group: Group, i: int, want: Want) -> bool:
        """Whether the backfill reservation keeps agent `i`'s room from this want."""
        r = self.reservation
        if r is None or group.job_id == r.job_id or self.packers[i].agent_id != r.agent_id:
            return False
        remaining = {name: self.packers[i].remaining.scalar(name) for name in r.keep}
        spec = want.spec
        return not r.allows(remaining, spec.scalars(), spec.max_completion_seconds, self.now)

    def end(self, state: _GroupState, left: Want | None) -> None:
        """The group is done: all its wants placed (`left` None), or `left` fit nowhere."""
        if left is None:
            return
        group = state.group
        self.waiting.append(group.job_id)
        self.left[group.job_id] = left
        skip = set() if group.gpus else self.gpu_agents
        if state.broke:
            self.constrained[group.job_id] = state.broke
        elif (
            state.placed_before  # else the round was whole when it began: nobody took its room
            and _within(left.spec, self.most_offered)
            and _fits_any(self.packers, self.offered, left.spec, skip)
            and not self._fit_at_start(state, left.spec, skip)
        ):
            self.behind.add(group.job_id)
        if group.gang:
            for i, (remaining, tasks, count) in state.saved.items():
                packer, wants = self.packers[i], self.placed[i]
                packer.remaining = remaining
                del packer.tasks[tasks:]
                self.placed_count -= len(wants) - count
                del wants[count:]
                self.room.changed(i)
            self.start = state.saved_start

    def _fit_at_start(self, state: _GroupState, spec: TaskSpec, skip: set[int]) -> bool:
        """Whether one task of `spec` fit some agent (but those in `skip`) as it was when the
        group began: the agents the group changed as they were, the others as they are. When
        no agent has room for it now, only the first need be tried."""
        if not _within(spec, state.most_at_start):
            return False
        if self.room.may_fit(spec):
            return _fits_any(self.packers, self._at_start(state), spec, skip)
        packers = self.packers
        saved = [i for i in state.saved if i not in skip]
        return _fits_any(
            [packers[i] for i in saved], [state.saved[i][0] for i in saved], spec, set()
        )

    def _at_start(self, state: _GroupState) -> list[Resources]:
        """What each agent had left when the group began."""
        saved = state.saved
        return [saved[i][0] if i in saved else p.remaining for i, p in enumerate(self.packers)]

    def result(self) -> Plan:
        launches, unused = [], []
        for packer, wants in zip(self.packers, self.placed, strict=True):
            if packer.tasks:
                launches.append(
                    AgentLaunch(packer.agent_id, packer.offers, list(packer.tasks), wants)
                )
            else:
                unused.extend(packer.offers)
        return Plan(
            launches,
            unused,
            self.placed_count,
            self.waiting,
            self.behind,
            self.constrained,
            self.owner_share,
        )


def _wants_of(placed: list[list[Want]], job_id: str) -> list[Want]:
    return [w for wants in placed for w in wants if w.job_id == job_id]


def offer_facts(offer: common_pb2.Offer) -> AgentFacts:
    return AgentFacts(offer.agent_id, offer.hostname, {a.name: a.text for a in offer.attributes})


def _known_values(
    constraints: Sequence[Constraint],
    facts: dict[str, AgentFacts] | None,
    offered: Sequence[AgentFacts],
) -> dict[str, set[str]] | None:
    """Each GROUP_BY field's values over the agents known (None: no GROUP_BY)."""
    fields = {c.field for c in constraints if c.operator == "GROUP_BY"}
    if not fields:
        return None
    agents = list((facts or {}).values()) or list(offered)
    return {f: {v for a in agents if (v := a.value(f)) is not None} for f in fields}


_ROOM = ("cpus", "mem", "disk", "gpus")


class _Most:
    """What the agents of a round have left, kept as tasks are placed, to know at once that a
    task fits nowhere: a round of 100,000 agents' offers, mostly full, need not be walked to
    find so. Per resource the most any agent has left (a max-heap each), and per amount of
    cpus left the most mem an agent with that many has (so that agents with cpus but no
    mem and agents with mem but no cpus do not add up to room). An entry that is no longer
    its agent's is dropped when it reaches the top."""

    def __init__(self, packers: Sequence[OfferPacker]) -> None:
        self.packers = packers
        self.heaps: dict[str, list[tuple[float, int]]] = {name: [] for name in _ROOM}
        self.levels: list[float] = []  # the amounts of cpus left seen, ascending
        self.mem_at: dict[float, list[tuple[float, int]]] = {}  # cpus left -> max-heap of mem
        for i in range(len(packers)):
            self.changed(i)

    def changed(self, i: int) -> None:
        remaining = self.packers[i].remaining
        for name, heap in self.heaps.items():
            heapq.heappush(heap, (-remaining.scalar(name), i))
        cpus = remaining.scalar("cpus")
        if cpus not in self.mem_at:
            self.mem_at[cpus] = []
            bisect.insort(self.levels, cpus)
        heapq.heappush(self.mem_at[cpus], (-remaining.scalar("mem"), i))

    def most(self) -> dict[str, float]:
        out = {}
        packers = self.packers
        for name, heap in self.heaps.items():
            while heap and -heap[0][0] != packers[heap[0][1]].remaining.scalar(name):
                heapq.heappop(heap)
            out[name] = -heap[0][0] if heap else 0.0
        return out

    def may_fit(self, spec: TaskSpec) -> bool:
        """False if no agent has room for one task of `spec` (True: one may)."""
        needs = spec._needs
        if not _within(spec, self.most()):
            return False
        cpus, mem = needs.get("cpus", 0.0), needs.get("mem", 0.0)
        if not mem:
            return True
        packers = self.packers
        for level in self.levels[bisect.bisect_left(self.levels, cpus - 1e-9) :]:
            heap = self.mem_at[level]
            while heap:
                left = packers[heap[0][1]].remaining
                if left.scalar("cpus") == level and -heap[0][0] == left.scalar("mem"):
                    break
                heapq.heappop(heap)
            if heap and -heap[0][0] + 1e-9 >= mem:
                return True
        return False


def _within(spec: TaskSpec, most: dict[str, float]) -> bool:
    """Whether no scalar `spec` needs is more than `most` (a bound: it may still fit nowhere)."""
    return all(need <= most[name] + 1e-9 for name, need in spec._needs.items())


def _fits_any(
    packers: list[OfferPacker], offered: list[Resources], spec: TaskSpec, skip: set[int]
) -> bool:
    """Whether one task of `spec` fits some agent's offers (but those in `skip`) as given."""
    for i, (packer, whole) in enumerate(zip(packers, offered, strict=True)):
        if i in skip:
            continue
        now, packer.remaining = packer.remaining, whole
        try:
            if packer.fits(spec):
                return True
        finally:
            packer.remaining = now
    return False


def largest_fit(
    agent_totals: Sequence[tuple[str, Resources]], spec: TaskSpec, role: str = UNRESERVED
) -> bool:
    """True if some agent, when empty, could hold one task of `spec`."""
    for _, total in agent_totals:
        offer = common_pb2.Offer(
            offer_id="probe", agent_id="probe", resources=total.allocatable_to(role).to_proto()
        )
        if OfferPacker(offer, role).fits(spec):
            return True
    return False


def capacity(
    agent_totals: Sequence[tuple[str, Resources]],
    spec: TaskSpec,
    role: str = UNRESERVED,
    limit: int | None = None,
) -> int:
    """How many tasks of `spec` the agents could hold at once when idle (counting stops at
    `limit`)."""
    count = 0
    for _, total in agent_totals:
        offer = common_pb2.Offer(
            offer_id="probe", agent_id="probe", resources=total.allocatable_to(role).to_proto()
        )
        packer = OfferPacker(offer, role)
        while (limit is None or count < limit) and packer.pack(spec) is not None:
            count += 1
        if limit is not None and count >= limit:
            break
    return count
