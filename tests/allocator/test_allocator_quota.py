"""Quota guarantees and limits, static reservations, and GPUs only for GPU-aware frameworks."""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import (
    GPU_CAPABILITY,
    Allocator,
    AllocatorConfig,
    HoldRefused,
    OfferGrant,
)


def offered(grants, framework_id: str) -> Resources:
    return sum((g.resources for g in grants if g.framework_id == framework_id), Resources())


def test_limit_caps_what_a_role_is_offered():
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("dev", guarantee=None, limit=Resources.of(cpus=5))
    alloc.add_framework("d1", role="dev")
    for i in range(3):
        alloc.add_agent(f"a{i}", Resources.of(cpus=4, mem=1024))
    grants = alloc.allocate(0.0)
    # a0: 4 cpus (4/5 of the limit); a1: 1 cpu + all its mem; a2: mem only (cpus at limit)
    assert offered(grants, "d1").scalar("cpus") == 5
    assert offered(grants, "d1").scalar("mem") == 3072
    alloc2 = Allocator(AllocatorConfig())
    alloc2.set_quota("dev", guarantee=None, limit=Resources.of(cpus=5, mem=1024))
    alloc2.add_framework("d1", role="dev")
    for i in range(3):
        alloc2.add_agent(f"a{i}", Resources.of(cpus=4, mem=1024))
    grants = alloc2.allocate(0.0)
    # a0 whole; a1 cut to the last cpu; a2 cut to nothing (not offered at all)
    assert offered(grants, "d1") == Resources.of(cpus=5, mem=1024)
    assert sorted(g.agent_id for g in grants) == ["a0", "a1"]


def test_limit_below_guarantee_is_rejected():
    alloc = Allocator(AllocatorConfig())
    with pytest.raises(ValueError, match="exceeds its limit"):
        alloc.set_quota("r", Resources.of(cpus=4), Resources.of(cpus=2))


def test_guarantee_is_served_before_lower_shares():
    # prod has a guarantee of 4 cpus and the larger share; dev (share 0) would come first.
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("prod", guarantee=Resources.of(cpus=4))
    alloc.add_framework("p1", role="prod")
    alloc.add_framework("d1", role="dev")
    alloc.add_agent("old", Resources.of(cpus=8, mem=800), allocated={"p1": Resources.of(cpus=2)})
    # shares: prod 2/8 = .25 (below its guarantee of 4 cpus), dev 0
    grants = alloc.allocate(0.0)
    # stage 1 gives prod up to its guarantee (2 more cpus), stage 2 gives dev the rest of
    # the cpus; mem is not guaranteed, so prod's stage 1 grant takes it all.
    assert offered(grants, "p1") == Resources.of(cpus=2, mem=800)
    assert offered(grants, "d1") == Resources.of(cpus=4)


def test_headroom_is_held_back_for_a_guarantee_even_without_its_frameworks():
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("prod", guarantee=Resources.of(cpus=8))
    alloc.add_framework("d1", role="dev")
    alloc.add_agent("a0", Resources.of(cpus=8, mem=1024))
    alloc.add_agent("a1", Resources.of(cpus=8, mem=1024))
    grants = alloc.allocate(0.0)
    # 16 free cpus, 8 held back for prod: dev gets a0 whole and only a1's memory
    assert grants == [
        OfferGrant("d1", "a0", Resources.of(cpus=8, mem=1024)),
        OfferGrant("d1", "a1", Resources.of(mem=1024)),
    ]
    assert "held back" in " ".join(alloc.explain("d1", 0.0))
    alloc.add_framework("p1", role="prod")
    assert alloc.allocate(0.0) == [OfferGrant("p1", "a1", Resources.of(cpus=8))]


def test_reserved_resources_go_only_to_their_role():
    agent = Resources.parse("cpus(analytics):2;mem(analytics):1024;cpus:2;mem:1024")
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("web", role="web")
    alloc.add_agent("a1", agent)
    assert alloc.allocate(0.0) == [OfferGrant("web", "a1", Resources.parse("cpus:2;mem:1024"))]
    assert alloc.allocate(0.0) == []  # the reservation waits for its role
    alloc.add_framework("an", role="analytics")
    assert alloc.allocate(0.0) == [
        OfferGrant("an", "a1", Resources.parse("cpus(analytics):2;mem(analytics):1024"))
    ]


def test_reserving_role_gets_reserved_and_unreserved_together():
    agent = Resources.parse("cpus(analytics):2;cpus:2;mem:512")
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("an", role="analytics")
    alloc.add_agent("a1", agent)
    assert alloc.allocate(0.0) == [OfferGrant("an", "a1", agent)]


def test_unallocated_reservations_count_toward_the_guarantee():
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("analytics", guarantee=Resources.of(cpus=2))
    alloc.add_framework("d1", role="dev")
    alloc.add_agent("a1", Resources.parse("cpus(analytics):2;cpus:4;mem:512"))
    # analytics' guarantee is met by its reservation: no headroom held back from dev
    assert alloc.allocate(0.0) == [OfferGrant("d1", "a1", Resources.parse("cpus:4;mem:512"))]


def test_gpu_agents_only_for_frameworks_with_the_gpu_capability():
    # As in Mesos: a framework without the capability would take the CPUs and memory of a GPU
    # agent and strand its GPUs, so it gets no offers from GPU agents at all.
    gpu_agent = Resources.parse("cpus:4;mem:1024;gpus:2")
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("plain")
    alloc.add_agent("g1", gpu_agent)
    alloc.add_agent("c1", Resources.parse("cpus:4;mem:1024"))
    assert alloc.allocate(0.0) == [OfferGrant("plain", "c1", Resources.parse("cpus:4;mem:1024"))]
    assert alloc.allocate(0.0) == []
    assert "GPU_RESOURCES" in " ".join(alloc.explain("plain", 0.0))
    alloc.add_framework("ml", capabilities={GPU_CAPABILITY})
    assert alloc.allocate(0.0) == [OfferGrant("ml", "g1", gpu_agent)]


def test_role_summaries_show_weight_quota_and_allocation():
    alloc = Allocator(AllocatorConfig())
    alloc.set_weight("prod", 3)
    alloc.set_quota("prod", Resources.of(cpus=2), Resources.of(cpus=6))
    alloc.add_framework("p1", role="prod")
    alloc.add_agent("a1", Resources.of(cpus=8, mem=100), allocated={"p1": Resources.of(cpus=4)})
    (prod,) = [s for s in alloc.role_summaries() if s["role"] == "prod"]
    assert prod["weight"] == 3
    assert prod["guarantee"] == Resources.of(cpus=2)
    assert prod["limit"] == Resources.of(cpus=6)
    assert prod["allocated"] == Resources.of(cpus=4)
    assert prod["dominant_share"] == pytest.approx(0.5)
    assert prod["weighted_share"] == pytest.approx(0.5 / 3)
    assert prod["frameworks"] == ["p1"]
    alloc.set_quota("prod", None, None)
    (prod,) = [s for s in alloc.role_summaries() if s["role"] == "prod"]
    assert prod["limit"] is None and prod["guarantee"].is_empty()


def test_quota_set_on_a_running_cluster_counts_what_is_already_free():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("d1", role="dev")
    for i in range(3):
        alloc.add_agent(f"a{i}", Resources.of(cpus=4, mem=256))
    alloc.allocate(0.0, ["a0"])  # dev holds a0; a1 and a2 are free (8 cpus)
    alloc.set_quota("prod", guarantee=Resources.of(cpus=6))
    grants = alloc.allocate(0.0)
    # 8 free cpus, 6 held back for prod: dev gets 2 cpus (and the memory it does not guard)
    assert offered(grants, "d1") == Resources.of(cpus=2, mem=512)
    alloc.set_quota("prod", None)  # cleared: nothing held back any more
    assert offered(alloc.allocate(0.0), "d1") == Resources.of(cpus=6)


def test_limit_counts_unallocated_reservations():
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("an", None, Resources.of(cpus=3))
    alloc.add_framework("x", role="an")
    alloc.add_agent("a1", Resources.parse("cpus(an):2;cpus:4;mem:256"))
    # consumption starts at 2 (the reservation): only 1 unreserved cpu more may be offered
    assert alloc.allocate(0.0) == [
        OfferGrant("x", "a1", Resources.parse("cpus(an):2;cpus:1;mem:256"))
    ]


def test_preemption_reads_the_limit_less_unused_reservations_and_room_within_it():
    # an's limit is 3 cpus; its 2 reserved cpus, unused, count against it: its tasks may
    # hold 1 cpu. Preemption reads that (in thousandths) and the room it could be offered.
    alloc = Allocator(AllocatorConfig())
    alloc.set_quota("an", None, Resources.of(cpus=3))
    alloc.add_framework("x", role="an")
    alloc.add_agent("a1", Resources.parse("cpus(an):2;cpus:4;mem:256"))
    alloc.add_agent("a2", Resources.parse("cpus:4;mem:256"))
    roles, total = alloc.preemption_roles()
    assert roles["an"] == (1.0, {}, {}, {"cpus": 1000})
    assert total["cpus"] == 10_000
    room = alloc.preemption_room(["an", "nobody"])
    assert set(room) == {"an"}
    assert room["an"]["a1"]["cpus"] == 3000  # its 2 reserved + 1 unreserved under the limit
    assert room["an"]["a2"]["cpus"] == 1000
    # Once its task holds that cpu, no unreserved cpu is room for it anywhere.
    alloc.add_agent("a3", Resources.parse("cpus:1;mem:64"), allocated={"x": Resources.of(cpus=1)})
    roles, _ = alloc.preemption_roles()
    assert roles["an"][2]["cpus"] == 1000 and roles["an"][3] == {"cpus": 1000}
    room = alloc.preemption_room(["an"])
    assert room["an"]["a2"].get("cpus", 0) == 0 and room["an"]["a1"]["cpus"] == 2000


def test_framework_gains_the_gpu_capability_on_update():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("ml")
    alloc.add_agent("g1", Resources.parse("cpus:4;mem:1024;gpus:1"))
    assert alloc.allocate(0.0) == []
    alloc.update_framework("ml", {GPU_CAPABILITY})
    assert [g.agent_id for g in alloc.allocate(0.0)] == ["g1"]


def test_a_guarantee_nobody_uses_is_named_by_why_and_in_the_role_summary():
    # The README's example: analytics is guaranteed 4 of the cluster's 6 cpus, and no
    # framework of that role exists. A framework in role * is offered the rest, declines
    # it, and asks why it gets nothing more.
    alloc = Allocator(AllocatorConfig())
    for n in range(3):
        alloc.add_agent(f"a{n}", Resources.of(cpus=2, mem=2048))
    alloc.set_quota("analytics", guarantee=Resources.parse("cpus:4;mem:4096"))
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(0.0)
    assert grant.resources == Resources.of(cpus=2, mem=2048)  # 4 of 6 held back
    reasons = alloc.explain("f1", 0.0)
    assert not any(r.startswith("not blocked") for r in reasons)
    (headroom,) = [r for r in reasons if "headroom" in r]
    assert "take all that 2 agent(s) have free" in headroom
    assert "role analytics lacks cpus:4;mem:4096 of its quota guarantee" in headroom
    assert "no framework of that role is subscribed" in headroom
    (row,) = [r for r in alloc.role_summaries() if r["role"] == "analytics"]
    assert row["headroom"] == Resources.parse("cpus:4;mem:4096")
    alloc.add_framework("an1", role="analytics")
    alloc.suppress("an1")
    reasons = alloc.explain("f1", 0.0)
    assert any("its frameworks are suppressed or disconnected" in r for r in reasons)


def test_offers_cut_by_headroom_are_said_even_when_something_is_offered():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.of(cpus=8, mem=1024))
    alloc.set_quota("prod", guarantee=Resources.of(cpus=6))
    alloc.add_framework("d1", role="dev")
    reasons = alloc.explain("d1", 0.0)  # before any cycle: a0's 8 cpus would be cut to 2
    (headroom,) = [r for r in reasons if "headroom" in r]
    assert "cut the offers of 1 agent(s) to what is left" in headroom
    assert "role prod lacks cpus:6 of its quota guarantee" in headroom


def test_a_hold_collects_no_more_than_its_roles_quota_limit():
    # Found by the property test: holds took free resources past the role's limit.
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:1;mem:256;cpus(r1):1;mem(r1):128"))
    alloc.add_framework("f1", role="r1")
    alloc.set_quota("r1", None, Resources.of(cpus=1))  # its reservation already counts 1
    alloc.add_hold("h1", "f1", count=1, size=Resources.of(cpus=1, mem=64), distinct=False,
                   deadline=10.0)  # fmt: skip
    grants = alloc.allocate(0.0)
    assert not any(g.hold_id for g in grants)  # it would take r1 to 2 cpus: it waits
    assert alloc.hold("h1").taken == {}


def test_a_hold_may_collect_its_roles_guarantee_beyond_its_fair_share():
    """A gang as big as its role's guarantee is owed it, though that is more than the role's
    fair share: its hold is accepted and collects it (it once stopped at the fair share, and
    a starved gang bigger than one agent never launched)."""
    alloc = Allocator(AllocatorConfig())
    for i in range(2):
        alloc.add_agent(f"a{i}", Resources.parse("cpus:2;mem:1024"))
    alloc.add_framework("fa", role="a")
    alloc.add_framework("fb", role="b")  # fair shares: half the cluster each, 2 cpus
    size = Resources.of(cpus=0.5, mem=64)
    with pytest.raises(HoldRefused, match="above framework fb's fair share"):
        alloc.add_hold("h0", "fb", count=6, size=size, distinct=False, deadline=10.0)
    alloc.set_quota("b", Resources.of(cpus=3), None)
    alloc.add_hold("h1", "fb", count=6, size=size, distinct=False, deadline=10.0)
    grants = alloc.allocate(0.0)
    for _ in range(3):  # what is offered besides the hold is declined, as a gang's framework does
        for g in grants:
            if not g.hold_id:
                alloc.decline(g.framework_id, g.agent_id, g.resources, 0.0, refuse_seconds=60)
        if any(g.hold_id for g in grants):
            break
        grants = alloc.allocate(0.0)
    met = [g for g in grants if g.hold_id == "h1"]  # all 6 collected, on both agents
    assert sorted(g.agent_id for g in met) == ["a0", "a1"]
    assert sum(g.resources.scalar("cpus") for g in met) == 3.0
    assert alloc.hold("h1") is None  # met
