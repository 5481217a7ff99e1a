"""Revocable resources in the allocator (revocable.py): what is lent, to whom, and when it must
come back. Pure: no master, no clock."""

from __future__ import annotations

from agora.common import Resources
from agora.master.allocator import REVOCABLE_CAPABILITY, Allocator, AllocatorConfig
from agora.master.allocator.revocable import excess


def lent(grants) -> dict[str, Resources]:
    return {g.framework_id: g.resources for g in grants if g.revocable}


def test_headroom_and_idle_reservations_are_lent_to_revocable_frameworks_only():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:4;mem:4096;cpus(ops):2;mem(ops):1024"))
    alloc.set_quota("gold", Resources.of(cpus=1), None)  # 1 cpu of headroom held back
    alloc.add_framework("plain", role="web")
    alloc.add_framework("spot", role="web", capabilities=[REVOCABLE_CAPABILITY])
    grants = alloc.allocate(0.0)
    ordinary = [g for g in grants if not g.revocable]
    assert sum(g.resources.scalar("cpus") for g in ordinary) == 3  # 4 less the headroom
    # Lent: ops's idle reservations and the headroom, as unreserved resources, once.
    assert lent(grants) == {"spot": Resources.parse("cpus:3;mem:1024")}
    assert lent(alloc.allocate(0.0)) == {}  # its offer is outstanding


def test_what_is_lent_stays_free_and_only_tasks_beyond_the_total_must_give_it_back():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:2;mem:1024;cpus(ops):2;mem(ops):1024"))
    alloc.add_framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    [lent_offer] = [g for g in alloc.allocate(0.0) if g.revocable]
    alloc.use_revocable("spot", "a0", Resources.parse("cpus:1.5;mem:256"))
    assert alloc.free("a0").scalar("cpus", "ops") == 2  # lent, not allocated
    alloc.recover_revocable("spot", "a0", Resources.parse("cpus:1.5;mem:256"))
    assert alloc._agents["a0"].revocable == {}
    total = Resources.parse("cpus:4;mem:2048")
    lent_task = Resources.parse("cpus:1.5;mem:256")
    assert excess(total, [Resources.parse("cpus:2;mem:64"), lent_task]) == {}
    assert excess(total, [Resources.parse("cpus:3;mem:64"), lent_task]) == {"cpus": 500}


def test_what_revocable_tasks_use_is_not_lent_again():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:2;mem:1024;cpus(ops):2;mem(ops):1024"))
    alloc.add_framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    assert lent(alloc.allocate(0.0)) == {"spot": Resources.parse("cpus:2;mem:1024")}
    alloc.use_revocable("spot", "a0", Resources.parse("cpus:1.5;mem:256"))  # accepted
    assert lent(alloc.allocate(0.0)) == {"spot": Resources.parse("cpus:0.5;mem:768")}
    # Books set, not added, whichever of an agent and its framework comes back first.
    alloc.set_revocable("spot", "a0", Resources.parse("cpus:1.5;mem:256"))
    alloc.set_revocable("spot", "a0", Resources.parse("cpus:1.5;mem:256"))
    assert alloc._agents["a0"].revocable == {"spot": Resources.parse("cpus:1.5;mem:256")}


def test_what_a_hold_collects_is_lent_until_the_hold_is_met():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:2;mem:1024"))
    alloc.add_agent("a1", Resources.parse("cpus:2;mem:1024"))
    alloc.add_framework("gang", role="*")
    alloc.add_framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    alloc.suppress("spot")  # nothing ordinary for it here: only what is lent counts
    size = Resources.of(cpus=1, mem=128)
    alloc.add_hold("h1", "gang", count=3, size=size, distinct=False, deadline=100.0)
    alloc.revive("spot")
    alloc.suppress("gang")
    grants = alloc.allocate(0.0)
    hold = alloc.hold("h1")
    assert hold is not None and hold.remaining == 1  # collected 2 of 3 on one agent
    # The two cpus the hold sits on are lent (the rest of the agents went to spot ordinarily).
    [where] = hold.taken
    assert lent(g for g in grants if g.agent_id == where) == {
        "spot": Resources.parse("cpus:2;mem:256")
    }


def test_a_refusal_of_lent_room_wakes_the_allocation_when_it_ends():
    """A declined revocable offer is a moment to allocate again, as a decline filter's
    expiry is: without it, lent room came back only with the next unrelated change."""
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:2;mem:1024;cpus(ops):2;mem(ops):1024"))
    alloc.add_agent("a1", Resources.parse("cpus:2;mem:1024;cpus(ops):2;mem(ops):1024"))
    alloc.add_framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    alloc.add_framework("gone", role="*", capabilities=[REVOCABLE_CAPABILITY])
    alloc.allocate(0.0)
    assert alloc.next_wakeup() is None
    alloc.refuse_revocable("spot", "a0", 60.0)
    alloc.refuse_revocable("gone", "a1", 30.0)
    alloc.remove_framework("gone")  # its refusal goes with it
    assert alloc.next_wakeup() == 60.0
    assert alloc.expire_filters(59.0) == []
    assert alloc.expire_filters(60.0) == ["a0"]
    assert alloc.next_wakeup() is None and alloc._agents["a0"].revocable_refused == {}


def test_a_revive_clears_refusals_of_lent_room_too():
    """A revocable job submitted to an idle batch framework waited out the refusal of lent
    room from before it (15 s idle): a revive asks for everything again."""
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", Resources.parse("cpus:2;mem:1024;cpus(ops):2;mem(ops):1024"))
    alloc.add_framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    [offer] = [g for g in alloc.allocate(0.0) if g.revocable]
    alloc.withdraw_revocable("spot", "a0")
    alloc.refuse_revocable("spot", "a0", 15.0)
    assert lent(alloc.allocate(1.0)) == {}
    alloc.revive("spot")
    assert lent(alloc.allocate(1.0)) == {"spot": offer.resources}
    assert alloc.next_wakeup() is None  # the refusal's heap entry is stale now
