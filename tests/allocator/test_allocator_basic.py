"""The allocator API the master codes against: offers, recover, filters, suppress, minimum size."""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig, OfferGrant

AGENT = Resources.parse("cpus:4;mem:4096;ports:[31000-31009]")


def make(**config) -> Allocator:
    return Allocator(AllocatorConfig(**config))


def test_bad_sorter_name_is_rejected_listing_valid_names():
    with pytest.raises(ValueError, match="drf, random"):
        AllocatorConfig(role_sorter="fair")
    with pytest.raises(ValueError, match="framework_sorter 'nope'"):
        AllocatorConfig(framework_sorter="nope")


def test_min_allocatable_accepts_mesos_flag_syntax():
    cfg = AllocatorConfig(min_allocatable="cpus:0.5|mem:64")
    assert cfg.min_allocatable == (Resources.of(cpus=0.5), Resources.of(mem=64))


def test_whole_free_agent_goes_to_one_framework_and_is_not_offered_twice():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    assert alloc.allocate(0.0) == [OfferGrant("f1", "a1", AGENT)]
    assert alloc.allocate(0.0) == []  # everything is allocated to f1 now
    assert alloc.free("a1").is_empty()


def test_recover_makes_resources_free_and_lowest_share_gets_them():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    alloc.allocate(0.0)
    used = Resources.of(cpus=1, mem=1024)
    alloc.recover("f1", "a1", AGENT - used, now=1.0)  # f1 launched a task of `used`
    alloc.add_framework("f2")
    # shares: f1 = .25 (cpus 1/4, mem 1024/4096), f2 = 0 -> f2 first
    assert alloc.allocate(1.0) == [OfferGrant("f2", "a1", AGENT - used)]
    assert alloc.dominant_share("f1") == pytest.approx(0.25)
    assert alloc.dominant_share("f2") == pytest.approx(0.75)


def test_decline_filter_hides_agent_until_expiry_on_the_injected_clock():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(100.0)
    alloc.recover("f1", "a1", grant.resources, now=100.0, refuse_seconds=5.0)
    assert alloc.next_wakeup() == 105.0
    assert alloc.allocate(104.9) == []
    assert alloc.allocate(105.0) == [OfferGrant("f1", "a1", AGENT)]


def test_decline_uses_configured_default_refuse_seconds():
    alloc = make(default_refuse_seconds=7.0)
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(0.0)
    alloc.decline("f1", "a1", grant.resources, now=0.0)
    assert alloc.next_wakeup() == 7.0


def test_filter_is_capped_at_365_days():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(0.0)
    alloc.recover("f1", "a1", grant.resources, now=0.0, refuse_seconds=1e12)
    assert alloc.next_wakeup() == 365 * 24 * 3600.0


def test_filtered_framework_lets_the_next_one_have_the_agent():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    (grant,) = alloc.allocate(0.0)
    assert grant.framework_id == "f1"  # shares: f1 = f2 = 0, tie broken by name
    alloc.recover("f1", "a1", grant.resources, now=0.0, refuse_seconds=5.0)
    assert alloc.allocate(0.0) == [OfferGrant("f2", "a1", AGENT)]


def test_suppress_stops_offers_and_revive_resumes_and_clears_filters():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(0.0)
    alloc.recover("f1", "a1", grant.resources, now=0.0, refuse_seconds=60.0)
    alloc.suppress("f1")
    assert alloc.allocate(100.0) == []
    alloc.revive("f1")
    assert alloc.next_wakeup() is None
    assert alloc.allocate(1.0) == [OfferGrant("f1", "a1", AGENT)]


def test_inactive_framework_and_agent_get_nothing():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    alloc.deactivate_framework("f1")
    assert alloc.allocate(0.0) == []
    alloc.activate_framework("f1")
    alloc.deactivate_agent("a1")
    assert alloc.allocate(0.0) == []
    alloc.activate_agent("a1")
    assert len(alloc.allocate(0.0)) == 1


def test_scraps_below_min_allocatable_are_not_offered():
    alloc = make()
    alloc.add_agent("a1", Resources.of(cpus=0.005, mem=16))
    alloc.add_framework("f1")
    assert alloc.allocate(0.0) == []
    alloc.add_agent("a2", Resources.of(cpus=0.01))  # cpus:0.01 alone is enough
    assert alloc.allocate(0.0) == [OfferGrant("f1", "a2", Resources.of(cpus=0.01))]


def test_remove_framework_frees_its_allocations():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    alloc.allocate(0.0)
    alloc.remove_framework("f1")
    assert alloc.free("a1") == AGENT


def test_agent_reregistering_with_tasks_of_a_framework_not_yet_back():
    alloc = make()
    used = Resources.of(cpus=1, mem=512)
    alloc.add_agent("a1", AGENT, allocated={"f1": used})
    assert alloc.free("a1") == AGENT - used
    alloc.add_framework("f1", allocated={"a1": used})  # same task table: not counted twice
    assert alloc.framework_allocations("f1") == {"a1": used}
    assert alloc.free("a1") == AGENT - used
    alloc.recover("f1", "a1", used, now=0.0)
    assert alloc.free("a1") == AGENT


def test_recover_on_removed_agent_or_framework_is_a_no_op():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    (grant,) = alloc.allocate(0.0)
    alloc.remove_framework("f1")
    assert alloc.free("a1") == AGENT  # the framework's removal gave everything back
    alloc.recover("f1", "a1", grant.resources, now=0.0)
    assert alloc.free("a1") == AGENT  # not twice: the agent has no more than it has
    alloc.add_framework("f2")
    assert [g.resources for g in alloc.allocate(0.0)] == [AGENT]
    alloc.remove_agent("a1")
    alloc.recover("f2", "a1", AGENT, now=0.0)
    assert alloc.allocate(0.0) == []  # the removed agent did not come back


def test_recovering_more_than_allocated_is_an_error():
    alloc = make()
    alloc.add_agent("a1", AGENT)
    alloc.add_framework("f1")
    alloc.allocate(0.0)
    with pytest.raises(ValueError, match="only"):
        alloc.recover("f1", "a1", AGENT + Resources.of(cpus=1), now=0.0)


def test_incremental_allocate_touches_only_the_given_agents():
    alloc = make()
    for i in range(3):
        alloc.add_agent(f"a{i}", AGENT)
    alloc.add_framework("f1")
    assert [g.agent_id for g in alloc.allocate(0.0, agent_ids=["a1"])] == ["a1"]
    assert sorted(g.agent_id for g in alloc.allocate(0.0)) == ["a0", "a2"]


def test_allocator_package_is_pure():
    # No network, no event loop, no clock of its own: `now` is always an argument.
    import ast
    from pathlib import Path

    import agora.master.allocator

    forbidden = {"grpc", "asyncio", "time", "datetime", "threading", "socket"}
    for path in Path(agora.master.allocator.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


def test_filters_are_indexed_by_agent_and_expire_from_both_sides():
    from agora.master.allocator.filters import DeclineFilters

    f = DeclineFilters()
    r = Resources.of(cpus=1, mem=64)
    f.add("f1", "a1", 10.0, r)
    f.add("f1", "a2", 20.0, r)
    f.add("f2", "a1", 30.0, r)

    def untils(table):
        return {k: {fid: refusal.until for fid, refusal in v.items()} for k, v in table.items()}

    assert untils(f.by_agent) == {"a1": {"f1": 10.0, "f2": 30.0}, "a2": {"f1": 20.0}}
    assert f.expire(10.0) == {"a1"}  # where a filter ended
    assert untils(f.by_agent) == {"a1": {"f2": 30.0}, "a2": {"f1": 20.0}}
    assert f.next_expiry() == 20.0
    f.clear_framework("f1")
    assert untils(f.by_agent) == {"a1": {"f2": 30.0}}
    assert untils(f.by_framework) == {"f2": {"a1": 30.0}}
    assert f.next_expiry() == 30.0
    refusal = f.by_agent["a1"]["f2"]
    assert refusal.hides(r, 29.9) and not refusal.hides(r, 30.0)
    assert f.expire(30.0) == {"a1"} and f.next_expiry() is None
