"""Property tests (hypothesis) over random clusters and event sequences.

A model kept by the test (what each framework holds on each agent, the filters it asked for,
its outstanding optimistic offers and its holds) is checked against every grant, in both offer
modes and with holds collecting: no resource held twice at once, held + collected by holds +
free = total on every agent, an optimistic offer never more than is free and never to more
frameworks at once than the fanout, nothing beyond a quota limit, reservations only to their
role, GPU agents only to GPU frameworks, no offer through a filter (one contained in what its
framework refused) or to a suppressed or inactive framework (a met hold excepted: filters and
suppression do not stop holds); that the record each cycle leaves on an agent (whom it offered,
whom the eligibility rule passed over and why) is the decision it made, and that "why no
offers" tells a framework the record says was filtered so; and DRF's progressive filling with
equal weights.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agora.common import UNRESERVED, Resources
from agora.master.allocator import (
    GPU_CAPABILITY,
    Allocator,
    AllocatorConfig,
    HoldRefused,
    sorter_names,
)
from agora.master.allocator.eligibility import FILTERED, GPU_AGENT

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROLES = [UNRESERVED, "r1", "r2"]


@st.composite
def agents(draw):
    cpus = draw(st.integers(1, 8))
    text = f"cpus:{cpus};mem:{draw(st.sampled_from([256, 1024]))}"
    if draw(st.integers(0, 4)) == 0:
        text += ";gpus:1"
    role = draw(st.sampled_from([None, "r1", "r2"]))
    if role:
        text += f";cpus({role}):{draw(st.integers(1, 2))};mem({role}):128"
    return Resources.parse(text)


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("allocate")),
        st.tuples(st.just("allocate_one"), st.integers(0, 50)),
        st.tuples(
            st.just("recover"),
            st.integers(0, 1000),
            st.sampled_from(["all", "half"]),
            st.sampled_from([None, 0.0, 1.0, 5.0]),
        ),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 3.0])),
        st.tuples(
            st.sampled_from(["suppress", "revive", "deactivate", "activate", "toggle"]),
            st.integers(0, 50),
        ),
        st.tuples(st.sampled_from(["drain", "undrain", "toggle_agent"]), st.integers(0, 50)),
        st.tuples(st.just("weight"), st.sampled_from(ROLES), st.sampled_from([0.5, 1.0, 3.0])),
        # optimistic offers: decline one (with a filter or not), or accept half of one
        st.tuples(st.just("decline_offer"), st.integers(0, 1000), st.sampled_from([None, 5.0])),
        st.tuples(st.just("accept_offer"), st.integers(0, 1000)),
        # holds: ask one (framework, count, cpus and mem per task, one per agent), release one
        st.tuples(
            st.just("hold"),
            st.integers(0, 50),
            st.integers(1, 3),
            st.sampled_from([(1, 64), (0.5, 128), (2, 32)]),
            st.booleans(),
        ),
        st.tuples(st.just("release_hold"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=40,
)


def _half(res: Resources) -> Resources:
    return Resources({k: math.floor(v * 500) / 1000 for k, v in res.scalars.items()})


class Model:
    """What the test believes: agents, frameworks, holdings and filters."""

    def __init__(self, alloc, agent_totals, frameworks, limit_r1):
        self.alloc = alloc
        self.totals = dict(agent_totals)
        self.agents = set(agent_totals)
        self.drained: set[str] = set()
        self.frameworks = dict(frameworks)  # fid -> (role, gpu)
        self.present = set(frameworks)
        self.suppressed: set[str] = set()
        self.inactive: set[str] = set()
        self.held: dict[str, dict[str, Resources]] = {a: {} for a in agent_totals}
        # (fid, agent) -> (until, what it refused): Mesos' filters hide only offers contained
        # in what was refused.
        self.filters: dict[tuple[str, str], tuple[float, Resources]] = {}
        self.limit_r1 = limit_r1
        self.now = 0.0
        self.fanout = alloc.config.optimistic_fanout
        # agent -> fid -> outstanding optimistic offer (they hold nothing)
        self.offered: dict[str, dict[str, Resources]] = {a: {} for a in agent_totals}
        self.holds: list[str] = []  # hold ids asked, live or not
        self.hold_seq = 0

    def collected(self, agent: str) -> dict[str, Resources]:
        """What live holds have taken on `agent`, by framework (allocated, not yet granted)."""
        out: dict[str, Resources] = {}
        for hold_id in self.holds:
            hold = self.alloc.hold(hold_id)
            if hold is not None and agent in hold.taken:
                fid = hold.framework_id
                out[fid] = out.get(fid, Resources()) + hold.taken[agent][0]
        return out

    def rescind_unsatisfiable(self):
        """As the master does after a commit or a hold took resources: optimistic offers
        that ask for more than is free now are rescinded (withdrawn, no filter)."""
        for agent in self.agents:
            free = self.alloc.free(agent)
            for fid, offer in list(self.offered[agent].items()):
                if not free.contains(offer):
                    del self.offered[agent][fid]
                    self.alloc.withdraw(fid, agent, offer)

    def check_grants(self, grants):
        granted_r1_unreserved = 0.0
        for g in grants:
            fid, agent = g.framework_id, g.agent_id
            assert fid in self.present and fid not in self.inactive
            assert agent in self.agents
            if not g.hold_id:  # a met hold's grants skip filters and suppression, on purpose
                assert fid not in self.suppressed and agent not in self.drained
                until, refused = self.filters.get((fid, agent), (-1.0, Resources()))
                hidden = until > self.now and refused.contains(g.resources)
                assert not hidden, "offered through a filter"
            role, gpu = self.frameworks[fid]
            assert g.resources.roles() <= {UNRESERVED, role}, "reservation to another role"
            if self.totals[agent].scalar("gpus") > 0:
                assert gpu, "GPU agent offered to a framework without the capability"
            if not g.exclusive:
                outstanding = self.offered[agent]
                outstanding[fid] = outstanding.get(fid, Resources()) + g.resources
                assert len(outstanding) <= self.fanout, "offered to more than the fanout"
                assert self.alloc.free(agent).contains(g.resources), "offered beyond free"
                continue
            held = self.held[agent]
            held[fid] = held.get(fid, Resources()) + g.resources
            in_use = sum(held.values(), Resources())
            assert self.totals[agent].contains(in_use), "resource offered twice at once"
            if role == "r1":
                granted_r1_unreserved += g.resources.scalar("cpus", UNRESERVED)
        if self.limit_r1 is not None and granted_r1_unreserved > 0:
            consumed = 0.0
            for agent in self.agents:
                consumed += self.totals[agent].scalar("cpus", "r1")
                for fid, res in self.held[agent].items():
                    if self.frameworks[fid][0] == "r1":
                        consumed += res.scalar("cpus", UNRESERVED)
            assert consumed <= self.limit_r1 + 1e-6, "offered beyond the quota limit"

    def allocate(self, agent_ids=None):
        """One cycle, its grants checked, and the record it left on each agent checked
        against the grants and what the model knows."""
        view = self.alloc.view()
        before = {agent: view.last_cycle(agent) for agent in self.agents}
        grants = self.alloc.allocate(self.now, agent_ids)
        self.check_grants(grants)
        for g in grants:
            if not g.hold_id:  # a hold's grants come from the hold stage, not the policy
                visit = view.last_cycle(g.agent_id)
                assert visit is not None and g.framework_id in visit.offered, "not recorded"
        for agent in self.agents:
            visit = view.last_cycle(agent)
            if visit is None or visit == before[agent]:
                continue  # not visited by this cycle (or visited to the same end)
            assert visit.at == self.now and visit.free is self.alloc.free(agent)
            offered_here = {g.framework_id for g in grants if g.agent_id == agent}
            assert set(visit.offered) <= offered_here
            gpus = self.totals[agent].scalar("gpus") > 0
            for fid, why in visit.skipped.items():
                # The rule sees only the frameworks the sorters yield.
                assert fid in self.present and fid not in self.suppressed | self.inactive
                if why == GPU_AGENT:
                    assert gpus and not self.frameworks[fid][1]
                else:
                    assert why == FILTERED
                    until, _ = self.filters.get((fid, agent), (-1.0, None))
                    assert until > self.now, "recorded as filtered without a filter"
                    if fid not in visit.offered and self.alloc.free(agent):
                        reasons = self.alloc.explain(fid, self.now)
                        assert any(r.startswith("filtered on") for r in reasons), reasons
        self.rescind_unsatisfiable()

    def check_conservation(self):
        for agent in self.agents:
            allocs = self.alloc.agent_allocations(agent)
            expected = dict(self.held[agent])
            for fid, taken in self.collected(agent).items():
                expected[fid] = expected.get(fid, Resources()) + taken
            assert allocs == {f: r for f, r in expected.items() if r}
            assert sum(allocs.values(), self.alloc.free(agent)) == self.totals[agent]

    def step(self, event):
        kind, *args = event
        alloc = self.alloc
        fids = sorted(self.frameworks)
        names = sorted(self.totals)
        if kind == "allocate":
            self.allocate()
        elif kind == "allocate_one":
            self.allocate([names[args[0] % len(names)]])
        elif kind == "recover":
            pairs = [(a, f) for a in sorted(self.agents) for f, r in self.held[a].items() if r]
            if not pairs:
                return
            agent, fid = pairs[args[0] % len(pairs)]
            part = self.held[agent][fid] if args[1] == "all" else _half(self.held[agent][fid])
            alloc.recover(fid, agent, part, self.now, refuse_seconds=args[2])
            self.held[agent][fid] = self.held[agent][fid] - part
            if args[2]:
                self.filters[(fid, agent)] = (self.now + args[2], part)
        elif kind == "advance":
            self.now += args[0]
            self.alloc.expire_holds(self.now)
        elif kind in ("decline_offer", "accept_offer"):
            pairs = [(a, f) for a in sorted(self.agents) for f in sorted(self.offered[a])]
            if not pairs:
                return
            agent, fid = pairs[args[0] % len(pairs)]
            offer = self.offered[agent].pop(fid)
            alloc.withdraw(fid, agent, offer)
            if kind == "decline_offer":
                if args[1]:  # as the master's Ledger.refuse: nothing given back, a filter
                    alloc.refuse(fid, agent, offer, self.now, args[1])
                    self.filters[(fid, agent)] = (self.now + args[1], offer)
                return
            part = _half(offer)
            if part and alloc.free(agent).contains(part):  # as the master checks first
                alloc.commit(fid, agent, part)
                self.held[agent][fid] = self.held[agent].get(fid, Resources()) + part
                self.rescind_unsatisfiable()
        elif kind == "hold":
            fid = fids[args[0] % len(fids)]
            if fid not in self.present:
                return
            cpus, mem = args[2]
            self.hold_seq += 1
            hold_id = f"h{self.hold_seq}"
            try:
                alloc.add_hold(
                    hold_id, fid, args[1], Resources.of(cpus=cpus, mem=mem), args[3], self.now + 5
                )
            except HoldRefused:
                return
            self.holds.append(hold_id)
        elif kind == "release_hold":
            live = [h for h in self.holds if alloc.hold(h) is not None]
            if live:
                alloc.release_hold(live[args[0] % len(live)])
        elif kind == "weight":
            alloc.set_weight(*args)
        elif kind in ("suppress", "revive", "deactivate", "activate", "toggle"):
            fid = fids[args[0] % len(fids)]
            if kind == "toggle":
                if fid in self.present:
                    alloc.remove_framework(fid)
                    self.present.discard(fid)
                    for held in self.held.values():
                        held.pop(fid, None)
                    for offered in self.offered.values():
                        offered.pop(fid, None)
                    self.filters = {k: v for k, v in self.filters.items() if k[0] != fid}
                else:
                    role, gpu = self.frameworks[fid]
                    alloc.add_framework(fid, role, {GPU_CAPABILITY} if gpu else set())
                    self.present.add(fid)
                self.suppressed.discard(fid)
                self.inactive.discard(fid)
                return
            if fid not in self.present:
                return
            if kind == "suppress":
                alloc.suppress(fid)
                self.suppressed.add(fid)
            elif kind == "revive":
                alloc.revive(fid)
                self.suppressed.discard(fid)
                self.filters = {k: v for k, v in self.filters.items() if k[0] != fid}
            elif kind == "deactivate":
                alloc.deactivate_framework(fid)
                self.inactive.add(fid)
            else:
                alloc.activate_framework(fid)
                self.inactive.discard(fid)
        else:
            agent = names[args[0] % len(names)]
            if kind == "toggle_agent":
                if agent in self.agents:
                    alloc.remove_agent(agent)
                    self.agents.discard(agent)
                    self.drained.discard(agent)
                    self.held[agent] = {}
                    self.offered[agent] = {}
                else:
                    alloc.add_agent(agent, self.totals[agent])
                    self.agents.add(agent)
            elif agent in self.agents:
                if kind == "drain":
                    alloc.deactivate_agent(agent)
                    self.drained.add(agent)
                else:
                    alloc.activate_agent(agent)
                    self.drained.discard(agent)


@pytest.mark.parametrize("fanout", [0, 2], ids=["pessimistic", "optimistic"])
@pytest.mark.parametrize("sorter", sorter_names())
@SETTINGS
@given(
    cluster=st.lists(agents(), min_size=1, max_size=6),
    frameworks=st.lists(st.tuples(st.sampled_from(ROLES), st.booleans()), min_size=1, max_size=5),
    limit_r1=st.one_of(st.none(), st.integers(1, 10)),
    guarantee_r2=st.integers(0, 4),
    events=EVENTS,
)
def test_safety_over_random_event_sequences(
    sorter, fanout, cluster, frameworks, limit_r1, guarantee_r2, events
):
    alloc = Allocator(
        AllocatorConfig(
            role_sorter=sorter, framework_sorter=sorter, seed=5, optimistic_fanout=fanout
        )
    )
    if limit_r1 is not None:
        alloc.set_quota("r1", None, Resources.of(cpus=limit_r1))
    if guarantee_r2:
        alloc.set_quota("r2", Resources.of(cpus=guarantee_r2))
    totals = {f"a{i}": res for i, res in enumerate(cluster)}
    fws = {f"f{i}": fw for i, fw in enumerate(frameworks)}
    for fid, (role, gpu) in fws.items():
        alloc.add_framework(fid, role, {GPU_CAPABILITY} if gpu else set())
    for agent, total in totals.items():
        alloc.add_agent(agent, total)
    model = Model(alloc, totals, fws, limit_r1)
    for event in events:
        model.step(event)
        model.check_conservation()
    model.allocate()  # a last cycle settles everything
    model.check_conservation()


DEMANDS = st.tuples(st.integers(1, 4), st.sampled_from([128, 256, 512, 1024]))


@SETTINGS
@given(
    cluster=st.lists(
        st.tuples(st.integers(2, 12), st.sampled_from([1024, 2048, 4096])), min_size=1, max_size=4
    ),
    demands=st.lists(DEMANDS, min_size=2, max_size=5),
    order=st.randoms(use_true_random=False),
)
def test_progressive_filling_with_equal_weights(cluster, demands, order):
    """Frameworks keep accepting one task per offer. Each task goes to a framework such that no
    framework with a lower dominant share could have fit its task in that offer; at the end no
    framework fits a task anywhere. Together: none can raise its share without lowering that of
    a framework whose share is no larger."""
    alloc = Allocator(AllocatorConfig())
    agents_ = [f"a{i}" for i in range(len(cluster))]
    for agent, (cpus, mem) in zip(agents_, cluster, strict=True):
        alloc.add_agent(agent, Resources.of(cpus=cpus, mem=mem))
    need = {f"f{i}": Resources.of(cpus=c, mem=m) for i, (c, m) in enumerate(demands)}
    for fid in need:
        alloc.add_framework(fid)
    quiet: set[str] = set()  # agents that offered nothing: they stay so (free only shrinks)
    while len(quiet) < len(agents_):
        shares = {fid: alloc.dominant_share(fid) for fid in need}
        agent = order.choice([a for a in agents_ if a not in quiet])
        grants = alloc.allocate(0.0, [agent])
        if not grants:
            quiet.add(agent)
        for g in grants:
            for other, share in shares.items():
                if share < shares[g.framework_id] - 1e-12:
                    assert not g.resources.contains(need[other]), (
                        f"{g.framework_id} (share {shares[g.framework_id]:.3f}) got an offer "
                        f"that {other} (share {share:.3f}) could use"
                    )
            if g.resources.contains(need[g.framework_id]):
                alloc.recover(g.framework_id, agent, g.resources - need[g.framework_id], 0.0)
            else:
                alloc.recover(g.framework_id, agent, g.resources, 0.0, refuse_seconds=1e6)
    for demand in need.values():  # Pareto: nobody's task fits anywhere any more
        for agent in agents_:
            assert not alloc.free(agent).contains(demand)


@SETTINGS
@given(
    cluster=st.lists(
        st.tuples(st.integers(2, 12), st.sampled_from([1024, 2048, 4096])), min_size=1, max_size=4
    ),
    frameworks=st.lists(
        st.tuples(DEMANDS, st.sampled_from(["r1", "r2", "r3"])), min_size=2, max_size=6
    ),
    weights=st.tuples(*[st.sampled_from([1, 2, 3])] * 3),
    order=st.randoms(use_true_random=False),
)
def test_hierarchical_progressive_filling(cluster, frameworks, weights, order):
    """The same with weighted roles: an offer never goes to a framework while a role of lower
    weighted share, or a framework of lower share in its own role, could have used it."""
    alloc = Allocator(AllocatorConfig())
    weight = dict(zip(["r1", "r2", "r3"], weights, strict=True))
    for role, w in weight.items():
        alloc.set_weight(role, w)
    agents_ = [f"a{i}" for i in range(len(cluster))]
    for agent, (cpus, mem) in zip(agents_, cluster, strict=True):
        alloc.add_agent(agent, Resources.of(cpus=cpus, mem=mem))
    need, role_of = {}, {}
    for i, ((c, m), role) in enumerate(frameworks):
        fid = f"f{i}"
        need[fid], role_of[fid] = Resources.of(cpus=c, mem=m), role
        alloc.add_framework(fid, role=role)
    quiet: set[str] = set()
    while len(quiet) < len(agents_):
        shares = {fid: alloc.dominant_share(fid) for fid in need}
        role_key = {r: alloc.role_share(r) / weight[r] for r in set(role_of.values())}
        agent = order.choice([a for a in agents_ if a not in quiet])
        grants = alloc.allocate(0.0, [agent])
        if not grants:
            quiet.add(agent)
        for g in grants:
            j = g.framework_id
            for i in need:
                ahead = role_key[role_of[i]] < role_key[role_of[j]] - 1e-12 or (
                    role_of[i] == role_of[j] and shares[i] < shares[j] - 1e-12
                )
                if ahead:
                    assert not g.resources.contains(need[i]), f"{j} got what {i} could use"
            if g.resources.contains(need[j]):
                alloc.recover(j, agent, g.resources - need[j], 0.0)
            else:
                alloc.recover(j, agent, g.resources, 0.0, refuse_seconds=1e6)
    for demand in need.values():
        for agent in agents_:
            assert not alloc.free(agent).contains(demand)
