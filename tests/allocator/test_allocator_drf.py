"""Worked DRF examples in the style of Mesos' sorter_tests.cpp: shares in a comment, exact order.

Allocations are set up through add_agent(allocated=...) (what re-registering agents report), and
the order is read with framework_order(), the order the next cycle would visit frameworks in.
"""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig, OfferGrant

GB = 1024


def keep_accepting(
    alloc: Allocator, demands: dict[str, Resources], now: float = 0.0, max_cycles: int = 200
) -> dict[str, int]:
    """Frameworks that launch one task of a fixed size per offer and return the rest at once.

    A framework whose offer is too small for its task declines that agent for good. Stops when
    a cycle grants nothing; returns the number of tasks each framework launched.
    """
    tasks = dict.fromkeys(demands, 0)
    for _ in range(max_cycles):
        grants = alloc.allocate(now)
        if not grants:
            return tasks
        for g in grants:
            need = demands[g.framework_id]
            if g.resources.contains(need):
                tasks[g.framework_id] += 1
                alloc.recover(g.framework_id, g.agent_id, g.resources - need, now)
            else:
                alloc.recover(g.framework_id, g.agent_id, g.resources, now, refuse_seconds=1e6)
    raise AssertionError("allocation did not settle")


def test_drf_paper_example():
    # 9 CPUs and 18 GB. A's tasks need <1 CPU, 4 GB> (dominant: memory, 4/18 = 2/9 per task),
    # B's <3 CPUs, 1 GB> (dominant: CPU, 3/9 = 1/3 per task). Progressive filling:
    #   A 2/9, B 1/3, A 4/9, B 2/3, A 2/3 -> then nothing fits either (0 CPUs left).
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a1", Resources.of(cpus=9, mem=18 * GB))
    alloc.add_framework("A")
    alloc.add_framework("B")
    tasks = keep_accepting(
        alloc, {"A": Resources.of(cpus=1, mem=4 * GB), "B": Resources.of(cpus=3, mem=1 * GB)}
    )
    assert tasks == {"A": 3, "B": 2}
    assert alloc.dominant_share("A") == pytest.approx(2 / 3)
    assert alloc.dominant_share("B") == pytest.approx(2 / 3)
    assert alloc.free("a1") == Resources.of(mem=4 * GB)


def test_drf_paper_example_over_three_agents():
    # The same demands on three agents of <3 CPUs, 6 GB> (total still 9 CPUs, 18 GB): a task
    # cannot span agents, so fragmentation bounds what fits.
    # per task: A 4/18 = .222 (mem), B 3/9 = .333 (cpus)
    alloc = Allocator(AllocatorConfig())
    for i in range(3):
        alloc.add_agent(f"a{i}", Resources.of(cpus=3, mem=6 * GB))
    alloc.add_framework("A")
    alloc.add_framework("B")
    tasks = keep_accepting(
        alloc, {"A": Resources.of(cpus=1, mem=4 * GB), "B": Resources.of(cpus=3, mem=1 * GB)}
    )
    # Each agent holds either one A task (4 GB leaves 2 GB, 2 CPUs: no second A, no B) or one
    # B task (all 3 CPUs). A goes first on a0 (tie by name), B on a1, A on a2.
    assert tasks == {"A": 2, "B": 1}


def test_order_by_dominant_share():
    # total: cpus 100, mem 100 (one agent)
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("a")
    alloc.add_framework("b")
    alloc.add_framework("c")
    alloc.add_agent(
        "x",
        Resources.of(cpus=100, mem=100),
        allocated={
            "a": Resources.of(cpus=5, mem=5),  # a: max(.05, .05) = .05
            "b": Resources.of(cpus=6),  # b: .06
            "c": Resources.of(cpus=1, mem=4),  # c: max(.01, .04) = .04
        },
    )
    # shares: c = .04, a = .05, b = .06
    assert alloc.framework_order() == ["c", "a", "b"]
    alloc.recover("b", "x", Resources.of(cpus=3), now=0.0)
    # shares: b = .03, c = .04, a = .05
    assert alloc.framework_order() == ["b", "c", "a"]


def test_ties_are_broken_by_name():
    # shares: a = b = c = 0
    alloc = Allocator(AllocatorConfig())
    for fid in ("c", "a", "b"):
        alloc.add_framework(fid)
    alloc.add_agent("x", Resources.of(cpus=10, mem=10))
    assert alloc.framework_order() == ["a", "b", "c"]


def test_adding_an_agent_changes_every_share():
    # total cpus 10: a has 4 (.4), b has mem 3 of 10 (.3) -> b first
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("a")
    alloc.add_framework("b")
    alloc.add_agent(
        "x",
        Resources.of(cpus=10, mem=10),
        allocated={"a": Resources.of(cpus=4), "b": Resources.of(mem=3)},
    )
    assert alloc.framework_order() == ["b", "a"]
    # total cpus 10, mem 100: a .4, b .03 -> still b; now cpus 100, mem 10: a .04, b .3 -> a
    alloc.add_agent("y", Resources.of(cpus=90))
    assert alloc.dominant_share("a") == pytest.approx(0.04)
    assert alloc.framework_order() == ["a", "b"]


def test_hierarchical_roles_before_frameworks():
    # total cpus 100. role eng: e1 = .30, e2 = .05 (role share .35);
    # role ops: o1 = .10 (role share .10). Roles first: ops (.10) before eng (.35), then within.
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("e1", role="eng")
    alloc.add_framework("e2", role="eng")
    alloc.add_framework("o1", role="ops")
    alloc.add_agent(
        "x",
        Resources.of(cpus=100),
        allocated={
            "e1": Resources.of(cpus=30),
            "e2": Resources.of(cpus=5),
            "o1": Resources.of(cpus=10),
        },
    )
    assert alloc.framework_order() == ["o1", "e2", "e1"]
    # A flat DRF would put e2 (.05) before o1 (.10): the role is what counts first.


def test_role_weights_divide_the_share():
    # total cpus 100. eng .35 / weight 4 = .0875 ; ops .10 / weight 1 = .10 -> eng first
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("e1", role="eng")
    alloc.add_framework("o1", role="ops")
    alloc.add_agent(
        "x",
        Resources.of(cpus=100),
        allocated={"e1": Resources.of(cpus=35), "o1": Resources.of(cpus=10)},
    )
    assert alloc.framework_order() == ["o1", "e1"]
    alloc.set_weight("eng", 4)
    assert alloc.framework_order() == ["e1", "o1"]
    summary = {s["role"]: s for s in alloc.role_summaries()}
    assert summary["eng"]["weight"] == 4
    assert summary["eng"]["weighted_share"] == pytest.approx(0.0875)


def test_weighted_roles_split_a_cluster_by_weight():
    # 12 agents of 1 CPU; eng weight 2, ops weight 1, one framework each taking every offer:
    # weighted shares stay equal when eng has twice ops' share: 8 and 4 agents.
    alloc = Allocator(AllocatorConfig())
    alloc.set_weight("eng", 2)
    alloc.add_framework("e", role="eng")
    alloc.add_framework("o", role="ops")
    for i in range(12):
        alloc.add_agent(f"a{i:02}", Resources.of(cpus=1, mem=64))
    grants = alloc.allocate(0.0)
    per_framework = {"e": 0, "o": 0}
    for g in grants:
        per_framework[g.framework_id] += 1
    assert per_framework == {"e": 8, "o": 4}


def test_one_cycle_spreads_agents_by_share():
    # 4 equal agents, 2 frameworks: each offer raises the receiver's share, so they alternate.
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    for i in range(4):
        alloc.add_agent(f"a{i}", Resources.of(cpus=2, mem=256))
    grants = alloc.allocate(0.0)
    # shares after each grant: f1 .25 | f2 .25 | f1 .5 | f2 .5
    assert [(g.framework_id, g.agent_id) for g in grants] == [
        ("f1", "a0"),
        ("f2", "a1"),
        ("f1", "a2"),
        ("f2", "a3"),
    ]
    assert all(isinstance(g, OfferGrant) for g in grants)
