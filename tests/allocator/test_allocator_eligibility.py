"""The eligibility rule (master/allocator/eligibility.py) as every reader of it sees it: the
record each cycle leaves on an agent and "why no offers" reading it, the room preemption may
make for a role, the agents a hold could fit on, and the rivals of an optimistic Accept."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agora.master.allocator.view as view_module
from agora.common import Resources
from agora.master.allocator import GPU_CAPABILITY, Allocator, AllocatorConfig, HoldRefused
from agora.master.allocator.eligibility import FILTERED, GPU_AGENT, Visit
from agora.master.allocator.preemption import Candidate, RoleState, plan

GPU_BOX = Resources.parse("cpus:4;mem:1024;gpus:1")
BOX = Resources.parse("cpus:4;mem:1024")


def _no_judging(monkeypatch) -> None:
    """Makes judging anew fail: what explain says must then come from the cycle's record."""

    def judged(*args, **kwargs):
        raise AssertionError("explain judged an agent whose record stands")

    monkeypatch.setattr(view_module, "skip_reason", judged)


# --- the record of the last cycle --------------------------------------------------------


def test_a_cycle_records_whom_it_offered_and_why_it_passed_each_other_one_over():
    # Equal shares, ties by name: "cpu" comes before "gpu", and the rule passes it over on the
    # GPU agent; on the plain agent "cpu" is first and takes it.
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("cpu")
    alloc.add_framework("gpu", capabilities={GPU_CAPABILITY})
    alloc.add_agent("g1", GPU_BOX)
    assert [(g.framework_id, g.agent_id) for g in alloc.allocate(3.0)] == [("gpu", "g1")]
    visit = alloc.view().last_cycle("g1")
    assert visit == Visit(3.0, alloc.free("g1"), ("gpu",), {"cpu": GPU_AGENT})
    assert visit.reason("cpu") == (True, GPU_AGENT) and visit.reason("gpu") == (True, None)
    alloc.add_agent("a1", BOX)
    alloc.allocate(4.0, ["a1"])
    assert alloc.view().last_cycle("a1") == Visit(4.0, alloc.free("a1"), ("cpu",), {})


def test_why_no_offers_reads_the_record_while_it_stands(monkeypatch):
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("f1")
    alloc.add_agent("a0", BOX)
    (g,) = alloc.allocate(0.0)
    alloc.decline("f1", "a0", g.resources, 0.0, refuse_seconds=60.0)
    assert alloc.allocate(1.0) == []  # the filter hides a0's whole free: nobody takes it
    assert alloc.view().last_cycle("a0").skipped == {"f1": FILTERED}
    with monkeypatch.context() as patched:
        _no_judging(patched)
        reasons = alloc.explain("f1", 2.0)
        [judged] = alloc.view().judge("f1", 2.0)
    assert reasons[0].startswith("filtered on 1 agent(s) for 58.0 s more")
    assert (judged.why, judged.decided_at, judged.until) == (FILTERED, 1.0, 60.0)
    # Revive drops the filter the record names: the record no longer says why, the rule does.
    alloc.revive("f1")
    [judged] = alloc.view().judge("f1", 2.0)
    assert (judged.why, judged.decided_at) == (None, None)


def test_a_record_stands_only_until_the_agent_changes():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    alloc.add_agent("a0", BOX)
    (g,) = alloc.allocate(0.0)  # f1 (first by name) takes a0 whole
    assert alloc.view().last_cycle("a0").free is alloc.free("a0")
    alloc.recover("f1", "a0", Resources.of(cpus=1, mem=256), 0.0)
    # Something was freed since the cycle: its record is about other free resources.
    assert alloc.view().last_cycle("a0").free is not alloc.free("a0")
    [judged] = alloc.view().judge("f2", 0.0)
    assert judged.decided_at is None


def test_a_filter_installed_after_the_cycle_drops_its_record():
    # Optimistic offers hold nothing: a Decline refuses without freeing anything, so the
    # agent's free resources stay the same object; the record must go with the new filter.
    alloc = Allocator(AllocatorConfig(optimistic_fanout=1))
    alloc.add_framework("f1")
    alloc.add_agent("a0", BOX)
    (g,) = alloc.allocate(0.0)
    assert alloc.view().last_cycle("a0").offered == ("f1",)
    alloc.withdraw("f1", "a0", g.resources)
    alloc.refuse("f1", "a0", g.resources, 0.0, 30.0)
    assert alloc.view().last_cycle("a0") is None
    assert alloc.explain("f1", 1.0)[0].startswith("filtered on 1 agent(s)")
    assert alloc.allocate(1.0) == []
    assert alloc.view().last_cycle("a0").skipped == {"f1": FILTERED}


def test_gaining_the_gpu_capability_drops_the_records_of_gpu_agents():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("ml")
    alloc.add_agent("g1", GPU_BOX)
    assert alloc.allocate(0.0) == []
    assert alloc.view().last_cycle("g1").skipped == {"ml": GPU_AGENT}
    alloc.update_framework("ml", {GPU_CAPABILITY})
    assert alloc.view().last_cycle("g1") is None
    assert not any("GPU" in reason for reason in alloc.explain("ml", 0.0))


def test_optimistic_offers_leave_the_same_record(monkeypatch):
    alloc = Allocator(AllocatorConfig(optimistic_fanout=2))
    for fid in ("a", "b", "c"):
        alloc.add_framework(fid, capabilities={GPU_CAPABILITY} if fid != "a" else ())
    alloc.add_agent("g1", GPU_BOX)
    grants = alloc.allocate(0.0)
    assert sorted(g.framework_id for g in grants) == ["b", "c"]
    visit = alloc.view().last_cycle("g1")
    assert (visit.offered, visit.skipped) == (("b", "c"), {"a": GPU_AGENT})
    with monkeypatch.context() as patched:
        _no_judging(patched)
        reasons = alloc.explain("a", 1.0)
    assert any("kept for frameworks with the GPU_RESOURCES capability" in r for r in reasons)


# --- preemption: what is room for a role --------------------------------------------------


def test_a_gpu_agent_is_no_room_for_a_role_without_a_gpu_framework():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("plain", role="cpu")
    alloc.add_framework("ml", role="ml", capabilities={GPU_CAPABILITY})
    alloc.add_agent("g1", GPU_BOX)
    alloc.add_agent("a1", BOX)
    alloc.add_agent("a2", BOX)
    alloc.deactivate_agent("a2")  # draining: no new offers there, for anyone
    room = alloc.preemption_room(["cpu", "ml"])
    assert room["cpu"]["g1"] is None and room["cpu"]["a2"] is None
    assert room["cpu"]["a1"]["cpus"] == 4000
    assert room["ml"]["g1"]["gpus"] == 1000 and room["ml"]["a2"] is None
    # Once a framework of the role may use GPU agents, they are room for the role.
    alloc.update_framework("plain", {GPU_CAPABILITY})
    assert alloc.preemption_room(["cpu"])["cpu"]["g1"]["cpus"] == 4000


HALF = {"cpus": 500, "mem": 64_000}
TOTAL = {"cpus": 4000, "mem": 4_096_000}


def _full_of_a() -> list[Candidate]:
    return [
        Candidate("fw-a", f"a{i}", "a", f"agent-{i % 2}", HALF, started_at=float(i))
        for i in range(8)
    ]


def test_no_task_is_stopped_where_the_role_may_not_be_offered_what_it_frees():
    # b is below its guarantee with a's tasks everywhere; agent-1 has GPUs and b no GPU
    # framework: only a task on agent-0 (b's room) may go. With agent-0 barred too, none.
    roles = {
        "a": RoleState("a", 1.0, {"cpus": 4000, "mem": 512_000}, {}, None),
        "b": RoleState("b", 1.0, {}, {"cpus": 1000}, HALF, 0.0),
    }
    free = {"agent-0": {"cpus": 0}, "agent-1": {"cpus": 0}}
    kw = dict(now=10, guarantee_timeout=5, fair_share_timeout=30)
    [made] = plan(
        roles, TOTAL, free, _full_of_a(), usable={"b": {"agent-0": {}, "agent-1": None}}, **kw
    )
    assert made.agent_id == "agent-0"
    [made] = plan(
        roles, TOTAL, free, _full_of_a(), usable={"b": {"agent-0": None, "agent-1": {}}}, **kw
    )
    assert made.agent_id == "agent-1"
    assert (
        plan(
            roles, TOTAL, free, _full_of_a(), usable={"b": {"agent-0": None, "agent-1": None}}, **kw
        )
        == []
    )
    # Free room on a barred agent is no room either: b does not wait for it, it preempts.
    free = {"agent-0": {"cpus": 2000, "mem": 2_000_000}, "agent-1": {"cpus": 0}}
    usable = {"b": {"agent-0": None, "agent-1": {"cpus": 0}}}
    [made] = plan(roles, TOTAL, free, _full_of_a(), usable=usable, **kw)
    assert made.agent_id == "agent-1"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    barred=st.lists(st.booleans(), min_size=3, max_size=3),
    placed=st.lists(st.integers(0, 2), min_size=1, max_size=12),
    wants=st.sampled_from([HALF, {"cpus": 1000}, {"cpus": 1500, "mem": 64_000}]),
)
def test_victims_are_only_where_the_beneficiary_may_be_offered(barred, placed, wants):
    agents = [f"agent-{i}" for i in range(3)]
    tasks = [
        Candidate("fw-a", f"t{n}", "a", agents[i], HALF, started_at=float(n))
        for n, i in enumerate(placed)
    ]
    held = {"cpus": 500 * len(tasks), "mem": 64_000 * len(tasks)}
    total = {"cpus": 6000, "mem": 6_000_000}
    roles = {
        "a": RoleState("a", 1.0, held, {}, None),
        "b": RoleState("b", 1.0, {}, {"cpus": 2000}, wants, 0.0, waiting_since=0.0),
    }
    free = {agent: {"cpus": 0, "mem": 0} for agent in agents}
    usable = {
        "b": {a: (None if bar else {"cpus": 0}) for a, bar in zip(agents, barred, strict=True)}
    }
    for made in plan(roles, total, free, tasks, 100, 0, 0, usable=usable):
        assert usable[made.beneficiary][made.agent_id] is not None


# --- holds and optimistic rivals ----------------------------------------------------------


def test_a_hold_is_sized_on_the_agents_the_rule_lets_it_use():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("plain")
    alloc.add_framework("ml", capabilities={GPU_CAPABILITY})
    alloc.add_agent("g1", GPU_BOX)
    alloc.add_agent("g2", GPU_BOX)
    alloc.add_agent("a1", Resources.parse("cpus:1;mem:1024"))
    with pytest.raises(HoldRefused, match="can never fit"):
        alloc.add_hold("h1", "plain", 2, Resources.of(cpus=2), False, 10.0)
    alloc.add_hold("h2", "ml", 2, Resources.of(cpus=2), False, 10.0)


def test_a_rival_the_rule_now_keeps_from_the_agent_has_no_priority():
    # big holds the plain agent; an Accept of all of g1 takes it past its fair share (half)
    # and breaks small's recent offer there: small, below its share, has priority ... until
    # it loses the GPU capability, when g1 is no agent it may be offered.
    alloc = Allocator(AllocatorConfig(optimistic_fanout=2))
    alloc.add_framework("big", capabilities={GPU_CAPABILITY})
    alloc.add_framework("small", capabilities={GPU_CAPABILITY})
    alloc.add_agent(
        "a0", Resources.of(cpus=8, mem=1024), allocated={"big": Resources.of(cpus=8, mem=1024)}
    )
    alloc.add_agent("g1", GPU_BOX)
    assert sorted(g.framework_id for g in alloc.allocate(0.0)) == ["big", "small"]
    rival = alloc.priority_rival("big", "g1", GPU_BOX, 0.1, 1.0)
    assert rival is not None and rival.framework_id == "small"
    alloc.update_framework("small", ())
    assert alloc.priority_rival("big", "g1", GPU_BOX, 0.1, 1.0) is None
