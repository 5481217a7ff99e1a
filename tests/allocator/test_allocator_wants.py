"""Offers sized by demand: a framework that says what it waits for is offered agents only until
its unanswered offers cover it, instead of every agent with room."""

from __future__ import annotations

from agora.common import EMPTY, Resources
from agora.master.allocator import Allocator, AllocatorConfig

AGENT = Resources.parse("cpus:4;mem:4096")
TASK = Resources.of(cpus=1, mem=128)


def cluster(agents: int = 10, mode: str = "pessimistic") -> Allocator:
    fanout = 2 if mode == "optimistic" else 0
    alloc = Allocator(AllocatorConfig(offer_mode=mode, optimistic_fanout=fanout))
    for i in range(agents):
        alloc.add_agent(f"a{i}", AGENT)
    return alloc


def test_without_wants_every_agent_with_room_is_offered():
    alloc = cluster()
    alloc.add_framework("f1")
    assert len(alloc.allocate(0.0)) == 10


def test_one_task_wanted_is_offered_one_agent_and_the_rest_stay_free():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK)
    [grant] = alloc.allocate(0.0)
    assert grant.framework_id == "f1"
    assert alloc.allocate(0.0) == []  # its offer covers its want: nothing more for it
    assert sum(not alloc.free(f"a{i}").is_empty() for i in range(10)) == 9


def test_an_answered_offer_makes_room_for_the_next_agent():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK)
    [grant] = alloc.allocate(0.0)
    # Declined (it could not use that agent): the next agent is offered, not the declined one.
    alloc.decline("f1", grant.agent_id, grant.resources, now=0.0, refuse_seconds=5.0)
    alloc.answered("f1", grant.resources)
    assert alloc.take_reopened()
    [again] = alloc.allocate(0.0)
    assert again.agent_id != grant.agent_id
    assert not alloc.take_reopened()


def test_wants_larger_than_an_agent_are_offered_as_many_agents_as_cover_them():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", Resources.of(cpus=9, mem=9 * 128))  # 9 tasks: 3 agents of 4 cpus
    assert len(alloc.allocate(0.0)) == 3


def test_a_launch_takes_what_it_uses_off_the_want():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", Resources.of(cpus=2, mem=256))
    [grant] = alloc.allocate(0.0)
    used = Resources.of(cpus=2, mem=256)
    alloc.launched("f1", used)
    alloc.recover("f1", grant.agent_id, grant.resources - used, now=0.0)
    alloc.answered("f1", grant.resources)
    # Nothing more waits: answering the offer does not bring another.
    assert not alloc.take_reopened()
    assert alloc.allocate(0.0) == []
    assert alloc.wants_of("f1") == ({}, {}, {})


def test_a_sated_framework_leaves_the_agents_to_the_next_in_line():
    alloc = cluster(agents=4)
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    alloc.set_wants("f1", TASK)
    grants = alloc.allocate(0.0)
    assert sorted(g.framework_id for g in grants) == ["f1", "f2", "f2", "f2"]


def test_an_empty_want_means_no_offers_and_none_lifts_the_limit():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", EMPTY)
    assert alloc.allocate(0.0) == []
    alloc.set_wants("f1", None)
    assert len(alloc.allocate(0.0)) == 10


def test_offers_held_when_the_want_is_told_count_towards_it():
    alloc = cluster()
    alloc.add_framework("f1")
    held = EMPTY
    for grant in alloc.allocate(0.0):  # f1 holds all ten agents' offers
        held = held + grant.resources
    alloc.set_wants("f1", TASK, out=held)
    alloc.recover("f1", "a9", AGENT, now=0.0)
    alloc.answered("f1", AGENT)
    assert alloc.allocate(0.0) == []  # the nine it still holds cover one task


def test_optimistic_offers_are_sized_by_demand_too():
    alloc = cluster(mode="optimistic")
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK)
    assert len(alloc.allocate(0.0)) == 1


def test_why_no_offers_says_the_offers_cover_the_want():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK)
    alloc.allocate(0.0)
    assert any(
        "cover all it said it waits for (cpus:1, mem:128)" in r for r in alloc.explain("f1", 0.0)
    )


def test_agents_too_small_for_the_smallest_task_are_left_to_others():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("scrap", Resources.of(cpus=4, mem=64))
    alloc.add_agent("room", Resources.of(cpus=4, mem=4096))
    alloc.add_framework("f1")
    alloc.add_framework("f2")
    alloc.set_wants("f1", Resources.of(cpus=2, mem=256), smallest=TASK)
    grants = {g.agent_id: g.framework_id for g in alloc.allocate(0.0)}
    assert grants == {"scrap": "f2", "room": "f1"}


def test_a_scrap_too_small_is_not_offered_even_when_nobody_else_wants_it():
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("scrap", Resources.of(cpus=4, mem=64))
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK, smallest=TASK)
    assert alloc.allocate(0.0) == []
    assert any(
        "1 agent(s) have less free than its smallest waiting task (cpus:1, mem:128)" in r
        for r in alloc.explain("f1", 0.0)
    )


def test_a_sated_framework_still_counts_for_the_fair_shares():
    # Out of the sorter while its offers cover its want, it still wants them: an optimistic
    # Accept by a framework that would go above its fair share must respect its offer.
    alloc = cluster(agents=1, mode="optimistic")
    alloc.add_framework("slow")
    alloc.add_framework("quick")
    alloc.set_wants("slow", Resources.of(cpus=2, mem=256))
    alloc.set_wants("quick", Resources.of(cpus=2, mem=256))
    assert len(alloc.allocate(0.0)) == 2  # both offered the one agent
    assert alloc.fair_share("slow") == 0.5
    rival = alloc.priority_rival("quick", "a0", AGENT, now=0.1, grace=0.5)
    assert rival is not None and rival.framework_id == "slow"


def test_a_sweep_offers_the_agents_with_room_for_the_smallest_task_in_agent_order():
    """In a packed cluster a sweep visits only the agents with the smallest task's cpus and
    mem free (Allocator._sweep), in the order the agents joined, as a walk over every agent
    would; an agent that joins again goes last."""
    room = {3: 1, 11: 3, 17: 2}  # agent -> cpus free; the other 61 have 0.5
    alloc = Allocator(AllocatorConfig())
    for i in range(64):
        used = Resources.of(cpus=4 - room.get(i, 0.5), mem=1024)
        alloc.add_agent(f"a{i}", AGENT, allocated={"gone": used})
    used = Resources.of(cpus=4 - room[3], mem=1024)
    alloc.add_agent("a3", AGENT, allocated={"gone": used})  # it registers again: last now
    alloc.add_framework("f1")
    alloc.set_wants("f1", Resources.of(cpus=100, mem=100), smallest=Resources.of(cpus=1, mem=64))
    floor = {"cpus": 1000, "mem": 64000}
    assert [a.agent_id for a in alloc._sweep(floor)] == ["a11", "a17", "a3"]  # none else
    offered = [(g.agent_id, g.resources.scalar("cpus")) for g in alloc.allocate(0.0)]
    assert offered == [("a11", 3.0), ("a17", 2.0), ("a3", 1.0)]


def test_the_agents_with_room_are_kept_as_tasks_start_and_end_and_agents_come_and_go():
    """The list of agents with the floor free (_Room) is kept from cycle to cycle: after any
    change it is what a walk over every agent would find, in the order they joined."""
    import random

    rng = random.Random(7)
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("gone")
    for i in range(200):
        alloc.add_agent(f"a{i}", AGENT, allocated={"gone": Resources.of(cpus=3.5, mem=1024)})
    floor = {"cpus": 1000, "mem": 64000}
    joined, sparse, dense = 200, 0, 0
    for step in range(900):
        # Tasks mostly end at first (room spreads: the ring), then start (room is scarce).
        ends = 0.6 if step < 200 else 0.15
        ids = list(alloc._agents)
        roomy = [a for a in ids if alloc.free(a).scalar("cpus") >= 1]
        roll = rng.random()
        if roll < ends:  # a task ends
            agent_id = rng.choice(ids)
            held = alloc.agent_allocations(agent_id).get("gone", EMPTY)
            if held.scalar("cpus") >= 0.5:
                alloc.recover("gone", agent_id, Resources.of(cpus=0.5, mem=0), now=0.0)
        elif roll < 0.8:  # one starts, where there is room
            agent_id = rng.choice(roomy or ids)
            held = alloc.agent_allocations(agent_id).get("gone", EMPTY)
            if alloc.free(agent_id).scalar("cpus") >= 0.5:
                more = held + Resources.of(cpus=0.5)
                alloc._set_allocation("gone", alloc._agents[agent_id], more)
        elif roll < 0.9:
            alloc.remove_agent(rng.choice(ids))
        else:
            joined += 1
            alloc.add_agent(f"a{joined}", AGENT, allocated={"gone": Resources.of(cpus=3, mem=9)})
        swept = [a.agent_id for a in alloc._sweep(floor)]
        walked = [
            a.agent_id
            for a in alloc._ring
            if a.free_vec.get("cpus", 0) >= 1000 and a.free_vec.get("mem", 0) >= 64000
        ]
        if alloc._rooms.get((1000, 64000)) is not None:  # few have room: the list is exactly those
            assert swept == walked, step
            sparse += 1
        else:  # many have room: every agent, and those among them
            dense += 1
            assert [a for a in swept if a in walked] == walked, step
            assert len(swept) == len(alloc._agents), step
    assert sparse > 100 and dense > 100, (sparse, dense)  # the run went through both


def test_a_sweep_that_stopped_early_goes_on_after_the_agent_it_stopped_at():
    """A sweep stops once every framework's offers cover its want; the next starts after
    that agent and comes round to the first, so the agents a framework was just offered are
    not walked past again and again (Mesos shuffles its agents for the same reason)."""
    alloc = cluster(4)
    alloc.add_framework("f1")
    alloc.set_wants("f1", TASK)
    order = []
    for _ in range(6):
        [grant] = alloc.allocate(0.0)
        order.append(grant.agent_id)
        alloc.decline("f1", grant.agent_id, grant.resources, now=0.0, refuse_seconds=0)
        alloc.answered("f1", grant.resources)
        assert alloc.take_reopened()
    assert order == ["a0", "a1", "a2", "a3", "a0", "a1"]


def test_free_amounts_no_agent_has_any_more_are_forgotten():
    """Agents are filed by free cpus and mem in thousandths: the amounts no agent has now
    go, or a long-lived master would keep every amount it ever saw."""
    alloc = Allocator(AllocatorConfig())
    alloc.add_agent("a0", AGENT)
    alloc.add_framework("f1")
    for mem in range(1, 200):
        [grant] = alloc.allocate(0.0)
        alloc.recover("f1", "a0", grant.resources, 0.0)  # all back
        [grant] = alloc.allocate(0.0)
        part = Resources.of(cpus=1, mem=mem)
        alloc.recover("f1", "a0", part, 0.0)  # part of it back: new amounts each time
        alloc.recover("f1", "a0", grant.resources - part, 0.0)
    assert alloc._levels == {"cpus": [4000], "mem": [4096000]}
    alloc.remove_agent("a0")
    assert alloc._levels == {"cpus": [], "mem": []}
