"""The pure parts of optimistic offers and holds: the fairness rule, fair shares, top-ups, and
how many of a hold's tasks fit an agent."""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig, HoldRefused
from agora.master.allocator.holds import slots, times
from agora.master.allocator.optimistic import Rival, beyond, fair_shares, priority_rival


def rival(share: float, fair: float = 0.5, at: float = 0.0, broken: bool = True) -> Rival:
    return Rival("g", share, fair, at, broken)


@pytest.mark.parametrize(
    ("taker_after", "rivals", "now", "has_priority"),
    [
        (0.7, [rival(0.1)], 0.2, True),  # above vs below, recent, broken: wait
        (0.5, [rival(0.1)], 0.2, False),  # the taker stays within its fair share
        (0.7, [rival(0.6)], 0.2, False),  # the rival is not below its share
        (0.7, [rival(0.1, at=0.0)], 1.5, False),  # the rival was slow: its grace is over
        (0.7, [rival(0.1, broken=False)], 0.2, False),  # its offer still fits after the take
    ],
)
def test_the_fairness_rule(taker_after, rivals, now, has_priority):
    got = priority_rival(taker_after, 0.5, rivals, now, grace_seconds=1.0)
    assert (got is not None) == has_priority


def test_the_rival_furthest_below_its_share_is_named():
    near, far = Rival("near", 0.4, 0.5, 0.0, True), Rival("far", 0.1, 0.5, 0.0, True)
    assert priority_rival(0.9, 0.5, [near, far], 0.1, 1.0) is far


def test_fair_shares_split_role_weights_among_their_frameworks():
    shares = fair_shares({"a": (2.0, ["a1", "a2"]), "b": (1.0, ["b1"]), "idle": (5.0, [])})
    assert shares == pytest.approx({"a1": 1 / 3, "a2": 1 / 3, "b1": 1 / 3})


def test_beyond_is_what_an_offer_adds_to_what_is_already_offered():
    offer = Resources.parse("cpus:4;mem:1024;ports:[31000-31009]")
    already = Resources.parse("cpus:1;mem:2048;ports:[31000-31004]")
    assert beyond(offer, already) == Resources.parse("cpus:3;ports:[31005-31009]")


def test_hold_slots_and_sizes():
    size = Resources.parse("cpus:1;mem:300")
    assert slots(Resources.parse("cpus:4;mem:1000"), size, 10) == 3
    assert slots(Resources.parse("cpus:4;mem:1000"), size, 2) == 2
    assert slots(Resources.parse("mem:1000"), size, 10) == 0
    assert times(size, 3) == Resources.parse("cpus:3;mem:900")


def test_an_optimistic_cycle_offers_without_holding_and_a_commit_checks_what_is_free():
    alloc = Allocator(AllocatorConfig(optimistic_fanout=2))
    total = Resources.parse("cpus:4;mem:4096")
    alloc.add_agent("a1", total)
    for fid in ("f1", "f2", "f3"):
        alloc.add_framework(fid)
    grants = alloc.allocate(0.0)
    assert sorted(g.framework_id for g in grants) == ["f1", "f2"]
    assert all(not g.exclusive and g.resources == total for g in grants)
    assert alloc.free("a1") == total and alloc.dominant_share("f1") == 0
    assert alloc.allocate(0.1) == []  # both still hold their offers: nothing new
    alloc.commit("f1", "a1", Resources.parse("cpus:3;mem:1024"))
    assert alloc.free("a1") == Resources.parse("cpus:1;mem:3072")
    with pytest.raises(ValueError):
        alloc.commit("f2", "a1", Resources.parse("cpus:2;mem:1024"))
    alloc.withdraw("f2", "a1", total)
    alloc.withdraw("f1", "a1", total)
    regrants = alloc.allocate(0.2)
    assert {g.resources for g in regrants} == {Resources.parse("cpus:1;mem:3072")}


def test_a_hold_is_refused_above_the_fair_share_and_met_from_freed_resources():
    alloc = Allocator()
    for i in range(2):
        alloc.add_agent(f"a{i}", Resources.parse("cpus:4;mem:4096"))
    alloc.add_framework("busy")
    first = alloc.allocate(0.0)  # busy, alone, is offered both agents
    assert [g.framework_id for g in first] == ["busy", "busy"]
    alloc.add_framework("gang")
    with pytest.raises(HoldRefused, match="above framework gang.s fair share"):
        alloc.add_hold("h0", "gang", 5, Resources.parse("cpus:1"), False, 60.0)  # 5/8 > 1/2
    with pytest.raises(HoldRefused, match="can never fit"):
        alloc.add_hold("h0", "gang", 3, Resources.parse("cpus:1"), True, 60.0)  # 2 agents
    alloc.add_hold("h1", "gang", 2, Resources.parse("cpus:1;mem:64"), True, 60.0)
    # busy gives the first agent back: the hold takes one task's worth there, no more.
    alloc.recover("busy", "a0", first[0].resources, 1.0)
    grants = alloc.allocate(1.0)
    assert not [g for g in grants if g.hold_id]
    hold = alloc.hold("h1")
    assert hold is not None and hold.remaining == 1
    # The rest of that agent was offered as usual; declined, it no longer counts to gang's
    # share (the hold collects only within the fair share).
    for g in grants:
        alloc.decline(g.framework_id, g.agent_id, g.resources, 1.0, refuse_seconds=60)
    # ... and the second: the hold is met, both agents' parts granted at once, held.
    alloc.recover("busy", "a1", first[1].resources, 2.0)
    met = [g for g in alloc.allocate(2.0) if g.hold_id == "h1"]
    assert sorted(g.agent_id for g in met) == ["a0", "a1"]
    assert all(g.exclusive and g.resources == Resources.parse("cpus:1;mem:64") for g in met)
    assert alloc.hold("h1") is None


def test_an_expired_hold_gives_back_what_it_took():
    alloc = Allocator()
    for i in range(2):
        alloc.add_agent(f"a{i}", Resources.parse("cpus:4;mem:4096"))
    alloc.add_framework("gang")
    alloc.add_hold("h", "gang", 2, Resources.parse("cpus:1;mem:64"), True, 60.0)
    alloc.remove_agent("a1")  # one agent left: the distinct hold can take one task only
    alloc.suppress("gang")  # a suppressed framework's hold still collects; it gets no offers
    assert alloc.allocate(0.0) == []
    hold = alloc.hold("h")
    assert hold is not None and hold.remaining == 1
    assert alloc.free("a0") == Resources.parse("cpus:3;mem:4032")
    assert alloc.dominant_share("gang") == pytest.approx(0.25)
    assert alloc.expire_holds(59.0) == []
    [expired] = alloc.expire_holds(60.0)
    assert expired.hold_id == "h"
    assert alloc.free("a0") == Resources.parse("cpus:4;mem:4096")
    assert alloc.dominant_share("gang") == 0


def test_a_hold_collects_only_within_its_frameworks_fair_share():
    alloc = Allocator()
    four = Resources.parse("cpus:4;mem:4096")
    alloc.add_agent("a0", four, allocated={"gang": four})
    alloc.add_agent("a1", four, allocated={"busy": four})
    alloc.add_framework("gang")
    alloc.add_framework("busy")
    alloc.add_hold("h", "gang", 2, Resources.parse("cpus:1;mem:64"), False, 60.0)
    # busy's tasks end: gang is at its fair share (0.5) already, so the hold takes none of it.
    two = Resources.parse("cpus:2;mem:2048")
    alloc.recover("busy", "a1", two, 1.0)
    grants = alloc.allocate(1.0)
    assert [(g.framework_id, g.hold_id) for g in grants] == [("busy", "")]
    hold = alloc.hold("h")
    assert hold is not None and hold.remaining == 2
    # gang's own tasks end: what they give back goes to its hold, which is met.
    alloc.recover("gang", "a0", two, 2.0)
    met = [g for g in alloc.allocate(2.0) if g.hold_id == "h"]
    assert [g.resources for g in met] == [Resources.parse("cpus:2;mem:128")]
