"""Common tests run over every registered sorter (as Mesos runs its sorter tests per type)."""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig, make_sorter, sorter_names

SORTERS = sorter_names()


def test_registry_has_drf_and_random():
    assert {"drf", "random"} <= set(SORTERS)


@pytest.mark.parametrize("name", SORTERS)
def test_only_active_clients_come_out_once_each(name):
    s = make_sorter(name, seed=3)
    for c in ("a", "b", "c", "d"):
        s.add(c)
    for c in ("a", "b", "c"):
        s.activate(c)
    s.deactivate("b")
    s.remove("c")
    assert sorted(s.sorted()) == ["a"]
    s.activate("b")
    s.activate("d")
    assert sorted(s.order()) == ["a", "b", "d"]
    assert sorted(s.sorted()) == ["a", "b", "d"]


@pytest.mark.parametrize("name", SORTERS)
def test_stopping_early_loses_no_client(name):
    s = make_sorter(name, seed=3)
    for c in "abcdef":
        s.add(c)
        s.activate(c)
    it = s.sorted()
    first = next(it)
    s.update(first, 0.9)  # the client just served gets a bigger share mid-iteration
    next(it)
    it.close()
    assert sorted(s.sorted()) == list("abcdef")


@pytest.mark.parametrize("name", SORTERS)
def test_update_during_iteration_never_yields_a_client_twice(name):
    s = make_sorter(name, seed=3)
    for c in "abc":
        s.add(c)
        s.activate(c)
    seen = []
    it = s.sorted()
    for c in it:
        seen.append(c)
        s.update(c, 0.0 if c == "c" else 0.5)
    assert sorted(seen) == ["a", "b", "c"]


@pytest.mark.parametrize("name", SORTERS)
def test_bad_weight_is_rejected(name):
    s = make_sorter(name)
    with pytest.raises(ValueError, match="positive"):
        s.add("a", weight=0)
    s.add("b")
    with pytest.raises(ValueError, match="positive"):
        s.set_weight("b", -1)


@pytest.mark.parametrize("name", SORTERS)
def test_allocator_with_sorter_offers_each_agent_once_and_conserves(name):
    alloc = Allocator(AllocatorConfig(role_sorter=name, framework_sorter=name, seed=7))
    for i in range(3):
        alloc.add_framework(f"f{i}", role=f"r{i % 2}")
    total = Resources.parse("cpus:4;mem:1024;ports:[1000-1010]")
    for i in range(10):
        alloc.add_agent(f"a{i}", total)
    grants = alloc.allocate(0.0)
    assert sorted(g.agent_id for g in grants) == sorted(f"a{i}" for i in range(10))
    assert alloc.allocate(0.0) == []
    for i in range(10):
        held = alloc.agent_allocations(f"a{i}")
        assert sum(held.values(), alloc.free(f"a{i}")) == total


@pytest.mark.parametrize("name", SORTERS)
def test_allocator_with_sorter_skips_suppressed_and_filtered(name):
    alloc = Allocator(AllocatorConfig(role_sorter=name, framework_sorter=name, seed=7))
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    alloc.add_agent("a1", Resources.of(cpus=1, mem=64))
    alloc.suppress("f2")
    (g,) = alloc.allocate(0.0)
    assert g.framework_id == "f1"
    alloc.recover("f1", "a1", g.resources, now=0.0, refuse_seconds=10)
    assert alloc.allocate(1.0) == []
    alloc.revive("f2")
    (g,) = alloc.allocate(1.0)
    assert g.framework_id == "f2"


def test_random_sorter_with_a_seed_repeats_its_order():
    orders = []
    for _ in range(2):
        s = make_sorter("random", seed=42)
        for c in "abcdefgh":
            s.add(c)
            s.activate(c)
        orders.append([s.order() for _ in range(3)])
    assert orders[0] == orders[1]
    assert len({tuple(o) for o in orders[0]}) > 1  # but it does shuffle between calls


def test_random_sorter_ignores_shares():
    s = make_sorter("random", seed=1)
    for c in "ab":
        s.add(c)
        s.activate(c)
    s.update("a", 0.99)
    firsts = {s.order()[0] for _ in range(50)}
    assert firsts == {"a", "b"}


@pytest.mark.parametrize("name", SORTERS)
def test_weights_change_no_membership(name):
    s = make_sorter(name, seed=2)
    for c in "abc":
        s.add(c)
        s.activate(c)
    s.set_weight("b", 3)
    s.deactivate("c")
    s.set_weight("c", 2)
    assert sorted(s.order()) == ["a", "b"]
    assert sorted(s.sorted()) == ["a", "b"]
    assert s.first() in {"a", "b"}
    s.remove("b")
    s.activate("c")
    assert sorted(s.sorted()) == ["a", "c"]


def test_drf_weight_divides_the_share():
    s = make_sorter("drf")
    for c in "ab":
        s.add(c)
        s.activate(c)
    s.update("a", 0.4)
    s.update("b", 0.3)
    # weighted: a .4, b .3 -> b first; a with weight 2: .2 -> a first
    assert s.order() == ["b", "a"] and s.first() == "b"
    s.set_weight("a", 2)
    assert s.order() == ["a", "b"] and s.first() == "a"


@pytest.mark.parametrize("name", SORTERS)
def test_peek_order_reads_without_changing(name):
    s = make_sorter(name, seed=4)
    for i, c in enumerate("abcdefg"):
        s.add(c)
        s.activate(c)
        s.update(c, i / 10)
    s.deactivate("c")
    for _ in range(3):
        s.update("a", 0.05)  # stale entries left behind
    assert sorted(s.peek_order()) == sorted("abdefg")
    assert sorted(s.sorted()) == sorted("abdefg")
    if name == "drf":
        assert list(s.peek_order()) == s.order() == ["a", "b", "d", "e", "f", "g"]
