"""Preemption decisions (master/allocator/preemption.py), pure: who is starved, which tasks go,
and the property that keeps roles from taking resources back and forth."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agora.master.allocator.drf import dominant_share, inverse_totals
from agora.master.allocator.preemption import (
    FAIR_SHARE,
    GUARANTEE,
    PRIORITY,
    Candidate,
    Preemption,
    RoleState,
    fair_shares,
    plan,
    starvation,
)

HALF = {"cpus": 500, "mem": 64_000}  # a 0.5 cpu, 64 MB task, in thousandths
TOTAL = {"cpus": 4000, "mem": 4_096_000}  # two agents of 2 cpus, 2 GB


def _a_full_cluster() -> list[Candidate]:
    """Role a's 8 tasks of 0.5 cpu fill both agents; task i started at time i."""
    return [
        Candidate("fw-a", f"a{i}", "a", f"agent-{i % 2}", HALF, started_at=float(i))
        for i in range(8)
    ]


def _roles(b_guarantee=None, b_wants=HALF, b_allocated=None, a_allocated=None, since=0.0):
    a = RoleState("a", 1.0, a_allocated or {"cpus": 4000, "mem": 512_000}, {}, None)
    b = RoleState("b", 1.0, b_allocated or {}, b_guarantee or {}, b_wants, since)
    return {"a": a, "b": b}


FREE = {"agent-0": {"cpus": 0, "mem": 1_792_000}, "agent-1": {"cpus": 0, "mem": 1_792_000}}


def test_a_role_below_its_guarantee_preempts_after_its_timeout_only():
    roles = _roles(b_guarantee={"cpus": 1000})
    before = plan(roles, TOTAL, FREE, _a_full_cluster(), now=4.9, guarantee_timeout=5,
                  fair_share_timeout=30)  # fmt: skip
    assert before == []  # starved, but not for 5 s yet
    [made] = plan(roles, TOTAL, FREE, _a_full_cluster(), now=5.0, guarantee_timeout=5,
                  fair_share_timeout=30)  # fmt: skip
    assert (made.beneficiary, made.reason) == ("b", GUARANTEE)
    # One task frees the 0.5 cpu needed: the youngest (started last) on its agent.
    assert [v.task_id for v in made.victims] == ["a7"]


def test_the_guarantee_is_met_then_nothing_more_is_taken_for_it():
    # b holds 1 cpu (its guarantee) and wants more: under "guarantee" it is owed nothing more,
    # and a (weight 1, fair share half: 2 cpus) holding 3 cpus could give one... under "fair
    # share" only, after that timeout.
    roles = _roles(
        b_guarantee={"cpus": 1000},
        b_allocated={"cpus": 1000, "mem": 128_000},
        a_allocated={"cpus": 3000, "mem": 384_000},
    )
    tasks = _a_full_cluster()[:6]
    assert plan(roles, TOTAL, FREE, tasks, now=10, guarantee_timeout=5,
                fair_share_timeout=30) == []  # fmt: skip
    [made] = plan(roles, TOTAL, FREE, tasks, now=31, guarantee_timeout=5, fair_share_timeout=30)
    assert made.reason == FAIR_SHARE and len(made.victims) == 1


def test_weighted_fair_shares_converge_to_half_and_stop():
    # a holds the whole cluster; b (the same weight) wants as much as it can get: one task at a
    # time, b is given tasks while it stays within half, and then nothing more is taken.
    tasks = _a_full_cluster()
    a_alloc = {"cpus": 4000, "mem": 512_000}
    b_alloc: dict[str, int] = {}
    free = {agent: dict(vec) for agent, vec in FREE.items()}
    stopped = []
    for _ in range(10):
        roles = _roles(b_wants=HALF, b_allocated=b_alloc, a_allocated=a_alloc)
        made = plan(roles, TOTAL, free, tasks, now=100, guarantee_timeout=5, fair_share_timeout=5)
        if not made:
            break
        for victim in made[0].victims:
            tasks.remove(victim)
            stopped.append(victim.task_id)
            a_alloc = {k: a_alloc[k] - victim.resources[k] for k in a_alloc}
        b_alloc = {k: b_alloc.get(k, 0) + HALF[k] for k in HALF}
    assert len(stopped) == 4  # b at 2 cpus of 4: half; a at half too
    inverse = inverse_totals(TOTAL)
    assert dominant_share(a_alloc, inverse) == dominant_share(b_alloc, inverse) == 0.5


def test_victims_are_revocable_first_then_lowest_priority_then_youngest():
    tasks = [
        Candidate("fw-a", "old-high", "a", "agent-0", HALF, priority=5, started_at=1.0),
        Candidate("fw-a", "young-high", "a", "agent-0", HALF, priority=5, started_at=9.0),
        Candidate("fw-a", "old-low", "a", "agent-0", HALF, priority=1, started_at=2.0),
        Candidate("fw-a", "revocable", "a", "agent-0", HALF, priority=9, revocable=True),
    ]
    free = {"agent-0": {"cpus": 0, "mem": 1_000_000}}
    total = {"cpus": 4000, "mem": 4_096_000}
    # a (weight 1 of 8: owed 0.5 cpu) holds 2 cpus, so it may give up to three tasks.
    a_alloc = {"cpus": 2000, "mem": 256_000}
    order = []
    for _ in range(3):
        a = RoleState("a", 1.0, a_alloc, {}, None)
        b = RoleState("b", 7.0, {}, {"cpus": 2000}, HALF, 0.0)
        [made] = plan({"a": a, "b": b}, total, free, tasks, now=10, guarantee_timeout=0,
                      fair_share_timeout=0)  # fmt: skip
        [victim] = made.victims
        order.append(victim.task_id)
        tasks.remove(victim)
        a_alloc = {k: a_alloc[k] - victim.resources[k] for k in a_alloc}
    assert order == ["revocable", "old-low", "young-high"]
    # The fourth would leave a below what it is owed.
    a = RoleState("a", 1.0, a_alloc, {}, None)
    b = RoleState("b", 7.0, {}, {"cpus": 2000}, HALF, 0.0)
    assert plan({"a": a, "b": b}, total, free, tasks, now=10, guarantee_timeout=0,
                fair_share_timeout=0) == []  # fmt: skip


def test_a_role_at_its_fair_share_is_never_a_victim():
    # a and b at half each; c arrives, also weight 1: fair is a third each, so a and b may each
    # give, but never below a third.
    total = {"cpus": 6000, "mem": 6_144_000}
    tasks = [
        Candidate("fw-a", f"a{i}", "a", "agent-0", {"cpus": 1000}, started_at=i) for i in range(3)
    ] + [Candidate("fw-b", f"b{i}", "b", "agent-1", {"cpus": 1000}, started_at=i) for i in range(3)]
    roles = {
        "a": RoleState("a", 1.0, {"cpus": 3000}, {}, None),
        "b": RoleState("b", 1.0, {"cpus": 3000}, {}, None),
        "c": RoleState("c", 1.0, {}, {}, {"cpus": 2000}, 0.0),
    }
    free = {"agent-0": {"cpus": 0}, "agent-1": {"cpus": 0}}
    # c needs 2 cpus on one agent: that would take a (or b) to 1 cpu, below its third.
    assert plan(roles, total, free, tasks, now=10, guarantee_timeout=0, fair_share_timeout=0) == []
    roles["c"] = RoleState("c", 1.0, {}, {}, {"cpus": 1000}, 0.0)
    [made] = plan(roles, total, free, tasks, now=10, guarantee_timeout=0, fair_share_timeout=0)
    assert len(made.victims) == 1
    assert fair_shares(roles.values()) == {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}


def test_within_a_role_a_higher_priority_demand_stops_lower_priority_tasks_only():
    tasks = [
        Candidate("fw-a", "low", "a", "agent-0", HALF, priority=0, started_at=1.0),
        Candidate("fw-a", "same", "a", "agent-0", HALF, priority=5, started_at=2.0),
    ]
    free = {"agent-0": {"cpus": 0, "mem": 1_000_000}}
    total = {"cpus": 1000, "mem": 1_000_000}
    # a alone holds the cluster: at its share, so fairness takes nothing; priority does.
    a = RoleState("a", 1.0, {"cpus": 1000, "mem": 128_000}, {}, HALF, None, 5, 0.0)
    early = plan({"a": a}, total, free, tasks, now=4, guarantee_timeout=5, fair_share_timeout=5)
    assert early == []  # waited less than the fair-share timeout
    [made] = plan({"a": a}, total, free, tasks, now=5, guarantee_timeout=5, fair_share_timeout=5)
    assert made.reason == PRIORITY and [v.task_id for v in made.victims] == ["low"]
    # A demand of the same priority as the rest stops nothing.
    even = RoleState("a", 1.0, {"cpus": 1000, "mem": 128_000}, {}, HALF, None, 0, 0.0)
    assert plan({"a": even}, total, free, tasks, now=9, guarantee_timeout=5,
                fair_share_timeout=5) == []  # fmt: skip


def test_what_fits_already_preempts_nothing():
    roles = _roles(b_guarantee={"cpus": 1000})
    free = {"agent-0": {"cpus": 500, "mem": 1_792_000}, "agent-1": {"cpus": 0, "mem": 0}}
    assert plan(roles, TOTAL, free, _a_full_cluster(), now=100, guarantee_timeout=5,
                fair_share_timeout=5) == []  # fmt: skip


def test_free_room_the_role_may_not_be_offered_is_no_room_for_it():
    # agent-0 has 2 cpus free, but reserved for role ops (perhaps lent to revocable tasks): b
    # could never be offered them. Counted as room, b would wait for ever; given what b may
    # be offered (`usable`), it preempts one of a's tasks.
    roles = _roles(b_guarantee={"cpus": 1000})
    free = {"agent-0": {"cpus": 2000, "mem": 1_792_000}, "agent-1": dict(FREE["agent-1"])}
    assert plan(roles, TOTAL, free, _a_full_cluster(), now=5, guarantee_timeout=5,
                fair_share_timeout=30) == []  # fmt: skip
    usable = {"b": FREE}  # the unreserved part: no cpus anywhere
    [made] = plan(roles, TOTAL, free, _a_full_cluster(), now=5, guarantee_timeout=5,
                  fair_share_timeout=30, usable=usable)  # fmt: skip
    assert made.beneficiary == "b" and len(made.victims) == 1


def test_a_plan_stops_no_more_than_max_victims_tasks():
    # b and c (weights 1, 1, 1 with a: each owed a third) both starved past their timeout,
    # each wanting a task; with max_victims 1 only the most starved is served this round.
    roles = _roles(b_wants=HALF)
    roles["c"] = RoleState("c", 1.0, {}, {}, HALF, 0.0)
    both = plan(roles, TOTAL, FREE, _a_full_cluster(), now=100, guarantee_timeout=5,
                fair_share_timeout=5)  # fmt: skip
    assert sorted(p.beneficiary for p in both) == ["b", "c"]
    [one] = plan(roles, TOTAL, FREE, _a_full_cluster(), now=100, guarantee_timeout=5,
                 fair_share_timeout=5, max_victims=1)  # fmt: skip
    assert len(one.victims) == 1
    assert plan(roles, TOTAL, FREE, _a_full_cluster(), now=100, guarantee_timeout=5,
                fair_share_timeout=5, max_victims=0) == []  # fmt: skip


def test_a_role_at_its_quota_limit_is_not_starved_and_preempts_nothing():
    # b (weight 1, as a: owed half, 2 cpus) holds 1 cpu, which is its quota limit, and wants
    # another half cpu. Below its fair share, it could still never be offered the room: it
    # is not starved, and stops nothing (else it would stop a's tasks every round).
    tasks = _a_full_cluster()[:6]
    a_alloc = {"cpus": 3000, "mem": 384_000}
    b_alloc = {"cpus": 1000, "mem": 128_000}
    at_limit = RoleState("b", 1.0, b_alloc, {}, HALF, 0.0, limit={"cpus": 1000})
    roles = {"a": RoleState("a", 1.0, a_alloc, {}, None), "b": at_limit}
    assert starvation(at_limit, 0.5, inverse_totals(TOTAL)) is None
    assert plan(roles, TOTAL, FREE, tasks, now=100, guarantee_timeout=0,
                fair_share_timeout=0) == []  # fmt: skip
    # With room for one more task under its limit, it preempts for that one, not a second.
    roles["b"] = RoleState("b", 1.0, b_alloc, {}, HALF, 0.0, limit={"cpus": 1500})
    [made] = plan(roles, TOTAL, FREE, tasks, now=100, guarantee_timeout=0, fair_share_timeout=0)
    assert made.reason == FAIR_SHARE and len(made.victims) == 1
    roles["b"] = RoleState("b", 1.0, {"cpus": 1500, "mem": 192_000}, {}, HALF, 0.0,
                           limit={"cpus": 1500})  # fmt: skip
    assert plan(roles, TOTAL, FREE, tasks, now=100, guarantee_timeout=0,
                fair_share_timeout=0) == []  # fmt: skip


def test_a_guarantee_past_the_limit_owes_nothing_beyond_the_limit():
    # b is guaranteed 2 cpus but limited to 1 by what it already holds: not starved.
    b = RoleState("b", 1.0, {"cpus": 1000}, {"cpus": 2000}, HALF, 0.0, limit={"cpus": 1000})
    assert starvation(b, 0.5, inverse_totals(TOTAL)) is None
    roles = {"a": RoleState("a", 1.0, {"cpus": 3000, "mem": 384_000}, {}, None), "b": b}
    assert plan(roles, TOTAL, FREE, _a_full_cluster()[:6], now=100, guarantee_timeout=0,
                fair_share_timeout=0) == []  # fmt: skip


def test_a_role_below_its_share_that_no_one_can_give_to_stops_its_own_lower_priority_work():
    # a is the only role with tasks, yet below its fair share (what it lacks is reserved for
    # others: no room for it). Nobody else can give; its priority-3 demand may still stop
    # its own priority-0 task.
    tasks = [
        Candidate("fw-a", "low", "a", "agent-0", HALF, priority=0, started_at=1.0),
        Candidate("fw-a", "high", "a", "agent-0", HALF, priority=5, started_at=2.0),
    ]
    a = RoleState("a", 1.0, {"cpus": 1000, "mem": 128_000}, {}, HALF, 0.0, 3, 0.0)
    free = {"agent-0": {"cpus": 2000, "mem": 512_000}}  # reserved for role ops
    [made] = plan({"a": a}, TOTAL, free, tasks, now=10, guarantee_timeout=5,
                  fair_share_timeout=5, usable={"a": {"agent-0": {}}})  # fmt: skip
    assert made.reason == PRIORITY and [v.task_id for v in made.victims] == ["low"]


# --- the property ------------------------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROLES = ["r0", "r1", "r2"]
WANTS = [{"cpus": 500}, {"cpus": 1000}, {"cpus": 500, "mem": 500}]


@st.composite
def snapshots(draw):
    agents = [f"agent-{i}" for i in range(draw(st.integers(1, 3)))]
    per_agent = {"cpus": 4000, "mem": 4000}
    tasks, allocated = [], {r: {"cpus": 0, "mem": 0} for r in ROLES}
    room = {agent: dict(per_agent) for agent in agents}
    # Mostly one role's tasks, on mostly full agents: where preemption has work to do.
    for i in range(draw(st.integers(0, 30))):
        agent = draw(st.sampled_from(agents))
        role = draw(st.sampled_from(["r0", "r0", "r0", *ROLES]))
        shape = {"cpus": draw(st.sampled_from([250, 500, 1000])),
                 "mem": draw(st.sampled_from([0, 250, 1000]))}  # fmt: skip
        if room[agent]["cpus"] < shape["cpus"] or room[agent]["mem"] < shape["mem"]:
            continue
        for k in shape:
            room[agent][k] -= shape[k]
            allocated[role][k] += shape[k]
        tasks.append(Candidate("fw-" + role, f"t{i}", role, agent, shape,
                               priority=draw(st.integers(0, 2)),
                               revocable=draw(st.booleans()), started_at=float(i)))  # fmt: skip
    roles = {}
    for role in ROLES:
        wants = draw(st.one_of(st.none(), st.sampled_from(WANTS)))
        guarantee = draw(st.sampled_from([{}, {"cpus": 1000}, {"cpus": 2000}]))
        weight = draw(st.sampled_from([1.0, 2.0, 3.0]))
        # A quota limit: none, at what it holds, or a task's room above it.
        held = allocated[role]["cpus"]
        limit = draw(st.sampled_from([None, {"cpus": held}, {"cpus": held + 500}]))
        roles[role] = RoleState(role, weight, allocated[role], guarantee, wants, 0.0,
                                limit=limit)  # fmt: skip
    total = {k: per_agent[k] * len(agents) for k in per_agent}
    return roles, total, room, tasks


def _apply(roles, made: list[Preemption]):
    allocated = {r: dict(s.allocated) for r, s in roles.items()}
    for p in made:
        for v in p.victims:
            for k, n in v.resources.items():
                allocated[v.role][k] -= n
        for k, n in (roles[p.beneficiary].wants or {}).items():
            allocated[p.beneficiary][k] = allocated[p.beneficiary].get(k, 0) + n
    return allocated


@SETTINGS
@given(snapshots())
def test_no_victims_role_ends_below_what_it_is_owed_and_no_gain_is_taken_back(snapshot):
    roles, total, room, tasks = snapshot
    made = plan(roles, total, room, tasks, now=100, guarantee_timeout=0, fair_share_timeout=0)
    inverse = inverse_totals(total)
    fair = fair_shares(roles.values())
    after = _apply(roles, made)
    for p in made:
        for victim in p.victims:
            state = roles[victim.role]
            assert dominant_share(after[victim.role], inverse) >= fair[victim.role] - 1e-9
            assert all(after[victim.role].get(k, 0) >= v for k, v in state.guarantee.items())
        owed = roles[p.beneficiary]
        # Never past its quota limit: what it gains it could be offered.
        limit = owed.limit or {}
        assert all(after[p.beneficiary].get(k, 0) <= v for k, v in limit.items()), p
        if p.reason == GUARANTEE:
            assert all(after[p.beneficiary].get(k, 0) <= v for k, v in owed.guarantee.items())
        else:
            assert dominant_share(after[p.beneficiary], inverse) <= fair[p.beneficiary] + 1e-9
    # Then the losers want their tasks back, starved for ever: none of them may take from
    # a role that gained in the first round (that would be thrashing).
    losers = {v.role: v.resources for p in made for v in p.victims}
    gainers = {p.beneficiary for p in made}
    again = {
        r: RoleState(
            r, s.weight, after[r], s.guarantee, losers.get(r, s.wants), 0.0, limit=s.limit
        )  # fmt: skip
        for r, s in roles.items()
    }
    left = [t for t in tasks if all(t not in p.victims for p in made)]
    for p in plan(again, total, room, left, now=100, guarantee_timeout=0, fair_share_timeout=0):
        if p.beneficiary in losers:
            assert not any(v.role in gainers for v in p.victims), (made, p)
