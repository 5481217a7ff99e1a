"""Revocable resources (issue 34, item 3), on the paused-clock master harness: what is free but
kept from everyone's ordinary offers (another role's unused reservations, headroom for a
guarantee) is offered, marked revocable, to frameworks with REVOCABLE_RESOURCES; tasks there are
stopped at once when an ordinary launch needs the room, with a notice and a record; the books
stay right through it and across a master restart."""

from __future__ import annotations

import grpc
import pytest
from core_harness import CallError, CoreHarness, task

from agora.common import Resources
from agora.common.task_states import REASON_PREEMPTED
from agora.master.allocator import REVOCABLE_CAPABILITY
from agora.v1 import agent_link_pb2, common_pb2

# 2 cpus anyone may use, and 2 reserved for role ops, which has no framework yet.
AGENT = "cpus:2;mem:1024;cpus(ops):2;mem(ops):512"


def _revocable(offers) -> list[common_pb2.Offer]:
    return [o for o in offers if o.revocable]


def _lend(h: CoreHarness):
    """Agent, a revocable framework (role '*') and a plain one (role web, which sees no
    revocable offer). The revocable framework fills the unreserved half with an ordinary task
    and launches one of 1.5 cpus on the reserved room it was lent."""
    agent = h.agent(AGENT)
    plain = h.framework("plain", role="web")
    lender = h.framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    assert not _revocable(plain.offers())  # never to a framework without the capability
    [lent] = _revocable(lender.offers())
    assert Resources.from_proto(lent.resources) == Resources.parse("cpus:2;mem:512")
    lender.accept([lent.offer_id], [task("spot-1", "cpus:1.5;mem:128")])
    [ordinary] = [o for o in (*lender.offers(), *plain.offers()) if not o.revocable]
    owner = lender if ordinary.framework_id == lender.framework_id else plain
    owner.accept([ordinary.offer_id], [task("filler", "cpus:2;mem:128")])
    run = next(r for r in agent.inbox.of("run_task") if r.task.task_id == "spot-1")
    assert run.task.revocable  # the master's word, which the agent keeps
    filler = next(r for r in agent.inbox.of("run_task") if r.task.task_id == "filler")
    assert not filler.task.revocable
    agent.status(lender.framework_id, "spot-1", common_pb2.TASK_RUNNING)
    return agent, plain, lender


def test_idle_reservations_are_lent_and_taken_back_at_once(tmp_path):
    h = CoreHarness()
    agent, plain, lender = _lend(h)
    # The reservations' role comes: its offer is all of them, the lent part included.
    ops = h.framework("ops", role="ops")
    h.advance(0.1)
    [offer] = [o for o in ops.offers() if not o.revocable]
    assert Resources.from_proto(offer.resources).scalar("cpus", "ops") == 2
    assert not agent.inbox.of("kill_task")  # an offer alone takes nothing back
    ops.accept([offer.offer_id], [task("ops-1", "cpus(ops):0.5;mem(ops):64")], refuse_seconds=0)
    assert not agent.inbox.of("kill_task")  # 2 + 1.5 + 0.5 cpus: the agent's 4 suffice
    h.advance(0.1)
    [offer] = [o for o in ops.offers() if not o.revocable]
    ops.accept([offer.offer_id], [task("ops-2", "cpus(ops):1.5;mem(ops):64")])
    # Now the tasks would use 5.5 cpus of 4: the revocable one is stopped, at once.
    [kill] = agent.inbox.of("kill_task")
    assert (kill.task_id, kill.reason) == ("spot-1", REASON_PREEMPTED)
    assert kill.message.startswith("revoked: framework ops (role ops) launched on")
    [notice] = lender.inbox.of("preemption")
    assert notice.task_id == "spot-1"
    [record] = h.core.preemptions.history
    assert (record.task_id, record.reason, record.beneficiary) == ("spot-1", "revocable", "ops")
    agent.status(lender.framework_id, "spot-1", common_pb2.TASK_KILLED, reason=REASON_PREEMPTED)
    h.advance(0.1)
    # Nothing lent is left in the books, and nothing of it was ever an allocation.
    books = h.core.allocator._agents[agent.agent_id]
    assert books.revocable == {}
    # Ordinary allocations of unreserved cpus never exceed the 2 there are (the lent 1.5 were
    # never among them).
    assert sum(r.scalar("cpus", "*") for r in books.allocated.values()) <= 2


def test_revocable_offers_are_launched_on_apart_and_declines_give_them_back():
    h = CoreHarness()
    h.agent(AGENT)
    lender = h.framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    [lent] = _revocable(lender.offers())
    [ordinary] = [o for o in lender.offers() if not o.revocable]
    with pytest.raises(CallError) as e:
        lender.accept([lent.offer_id, ordinary.offer_id], [task("mixed", "cpus:3;mem:64")])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "revocable offers cannot be merged" in str(e.value)
    # Declining what is lent refuses only that: the ordinary offer declined without a filter
    # comes back at once, nothing is lent again for the refusal's 60 s, then it is.
    lender.call("Decline", offer_ids=[lent.offer_id], filters={"refuse_seconds": 60})
    lender.call("Decline", offer_ids=[ordinary.offer_id], filters={"refuse_seconds": 0})
    h.advance(1)
    assert [o.revocable for o in lender.offers()] == [False]
    h.advance(60)
    assert len(_revocable(lender.offers())) == 1


def test_a_lent_offer_whose_room_ordinary_tasks_took_is_rescinded():
    h = CoreHarness()
    agent = h.agent(AGENT)
    lender = h.framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    ops = h.framework("ops", role="ops")
    h.advance(0.1)
    [lent] = _revocable(lender.offers())
    [mine] = [o for o in ops.offers() if not o.revocable]
    ops.accept([mine.offer_id], [task("ops-1", "cpus(ops):2;mem(ops):64")])
    assert not agent.inbox.of("kill_task")  # no revocable task ran: nothing to stop
    [rescinded] = lender.inbox.of("rescind")
    assert rescinded.offer_id == lent.offer_id
    with pytest.raises(CallError):  # the room it lent is used: nothing launches on it
        lender.accept([lent.offer_id], [task("spot-1", "cpus:1.5;mem:128")])
    assert not [r for r in agent.inbox.of("run_task") if r.task.task_id == "spot-1"]


def test_a_revocable_task_stays_revocable_across_a_master_restart(tmp_path):
    h = CoreHarness(state_dir=tmp_path)
    agent, plain, lender = _lend(h)
    runs = {r.task.task_id: r for r in agent.inbox.of("run_task")}
    h = h.restart()
    running = [
        agent_link_pb2.RunningTask(
            framework_id=r.framework_id, task=r.task, state=common_pb2.TASK_RUNNING
        )
        for r in runs.values()
    ]
    back = h.agent(AGENT, connect=False)
    back.connect(tasks=running, agent_id=agent.agent_id)
    again = h.framework("spot", role="*", subscribe=False, capabilities=[REVOCABLE_CAPABILITY])
    again.subscribe(framework_id=lender.framework_id)
    books = h.core.allocator._agents[agent.agent_id]
    # Lent, as before (what it is offered ordinarily meanwhile is another matter).
    assert books.revocable[lender.framework_id] == Resources.parse("cpus:1.5;mem:128")
    ops = h.framework("ops", role="ops")
    h.advance(0.1)
    [offer] = [o for o in ops.offers() if not o.revocable]
    ops.accept([offer.offer_id], [task("ops-1", "cpus(ops):2;mem(ops):64")])
    [kill] = back.inbox.of("kill_task")
    assert kill.task_id == "spot-1" and kill.reason == REASON_PREEMPTED


def test_the_sdks_fit_launches_on_lent_and_ordinary_offers_of_one_agent_apart():
    """An SDK framework with REVOCABLE_RESOURCES given both kinds of offer on one agent: fit()
    places the tasks in one launch per kind, each of which the master accepts (it refuses an
    Accept mixing them): the ordinary room is filled first, the lent one launched on first
    (an ordinary launch there would have the master rescind what it lent)."""
    from agora.frameworks.sdk import TaskSpec, fit

    h = CoreHarness()
    agent = h.agent(AGENT)
    lender = h.framework("spot", role="*", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    offers = lender.offers()
    assert sorted(o.revocable for o in offers) == [False, True]  # 2 cpus each, one agent
    specs = [TaskSpec(f"t{i}", cpus=1, mem=64, command="sleep 60") for i in range(3)]
    result = fit(offers, specs)
    assert [(p.revocable, len(p.tasks)) for p in result.placements] == [(True, 1), (False, 2)]
    for placement in result.placements:
        lender.accept([o.offer_id for o in placement.offers], placement.tasks)
    runs = {r.task.task_id: r.task.revocable for r in agent.inbox.of("run_task")}
    assert sorted(runs.values()) == [False, False, True]
    # The master's books: 1 cpu lent (not an allocation), 2 allocated.
    books = h.core.allocator._agents[agent.agent_id]
    assert books.revocable[lender.framework_id].scalar("cpus") == 1
    assert books.allocated[lender.framework_id].scalar("cpus") == 2


def _lent_headroom():
    """Role g is guaranteed 2 of the agent's 4 cpus (and 512 MB) and has no framework yet:
    the master keeps them back (headroom) and lends them to spot, which runs 4 revocable
    tasks there; role a fills the other 2 cpus with 4 ordinary tasks. Preemption is on."""
    h = CoreHarness(
        guarantee_preemption_timeout_seconds=5.0, fair_share_preemption_timeout_seconds=5.0
    )
    h.core.allocator.set_quota("g", Resources.parse("cpus:2;mem:512"), None)
    agent = h.agent("cpus:4;mem:4096")
    a = h.framework("a", role="a")
    h.advance(0.1)
    [offer] = a.offers()
    assert Resources.from_proto(offer.resources).scalar("cpus") == 2  # g's 2 kept back
    a.accept([offer.offer_id], [task(f"a{i}", "cpus:0.5;mem:64") for i in range(4)])
    spot = h.framework("spot", role="s", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    [lent] = _revocable(spot.offers())
    assert Resources.from_proto(lent.resources).scalar("cpus") == 2
    spot.accept([lent.offer_id], [task(f"spot{i}", "cpus:0.5;mem:64") for i in range(4)])
    for run in agent.inbox.of("run_task"):
        owner = spot if run.task.task_id.startswith("spot") else a
        agent.status(owner.framework_id, run.task.task_id, common_pb2.TASK_RUNNING)
    return h, agent, a, spot


def test_a_starved_role_takes_lent_room_back_before_anyones_allocation():
    """Issue 34: revocable tasks are the first victims. g, below its guarantee, is offered its
    headroom though it is lent: its launch stops the revocable tasks there at once, and none
    of a's ordinary tasks is preempted, then or after g's preemption timeout."""
    h, agent, a, spot = _lent_headroom()
    g = h.framework("g", role="g")
    g.call("Demand", unmet=Resources.parse("cpus:0.5;mem:64").to_proto())
    h.advance(0.1)
    [offer] = [o for o in g.offers() if not o.revocable]
    assert Resources.from_proto(offer.resources).scalar("cpus") == 2
    g.accept([offer.offer_id], [task(f"g{i}", "cpus:0.5;mem:64") for i in range(4)])
    g.call("Demand", unmet=[])
    kills = agent.inbox.of("kill_task")
    assert sorted(k.task_id for k in kills) == [f"spot{i}" for i in range(4)]
    assert {k.reason for k in kills} == {REASON_PREEMPTED}
    assert len(spot.inbox.of("preemption")) == 4  # each with its notice
    for kill in kills:
        agent.status(spot.framework_id, kill.task_id, common_pb2.TASK_KILLED,
                     reason=REASON_PREEMPTED)  # fmt: skip
    h.advance(10)  # past g's timeout: nothing of a's was ever needed
    assert len(agent.inbox.of("kill_task")) == 4
    assert {p.reason for p in h.core.preemptions.history} == {"revocable"}


def test_lent_room_a_starved_role_may_not_use_spares_the_revocable_tasks():
    """The room spot borrowed is ops's reservation, which b could never be offered: stopping
    spot's task would not help b, so b's guarantee is met by preempting one of a's tasks,
    and spot's task runs on (before this, the reserved room counted as room for b, and b,
    starved, preempted nothing at all)."""
    h = CoreHarness(guarantee_preemption_timeout_seconds=5.0)
    agent = h.agent(AGENT)
    a = h.framework("a", role="a")
    h.advance(0.1)
    [offer] = a.offers()
    a.accept([offer.offer_id], [task(f"a{i}", "cpus:0.5;mem:64") for i in range(4)])
    spot = h.framework("spot", role="s", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    [lent] = _revocable(spot.offers())
    spot.accept([lent.offer_id], [task("spot-1", "cpus:1.5;mem:64")])
    for run in agent.inbox.of("run_task"):
        owner = spot if run.task.task_id == "spot-1" else a
        agent.status(owner.framework_id, run.task.task_id, common_pb2.TASK_RUNNING)
    h.core.allocator.set_quota("b", Resources.parse("cpus:1"), None)
    b = h.framework("b", role="b")
    b.call("Demand", unmet=Resources.parse("cpus:0.5;mem:64").to_proto())
    for _ in range(24):  # 6 s: b declines what it cannot use (memory), as a framework would
        scraps = [o.offer_id for o in b.offers()]
        if scraps:
            b.call("Decline", offer_ids=scraps)
        h.advance(0.25)
    [kill] = agent.inbox.of("kill_task")
    assert kill.task_id.startswith("a") and kill.reason == REASON_PREEMPTED
    assert "role b needs" in kill.message


def test_revocable_work_in_lent_room_does_not_pause_priority_preemption():
    """A framework's priority-3 demand has a priority-0 task of its own stopped; once that
    has ended, the framework launches a priority-0 task on revocable resources (room lent on
    the same agent), then its priority-3 task in the room freed. The revocable task is not
    in the freed room (it holds nothing in the books): priority preemption goes on for the
    framework's next priority-3 task, not paused as if it had put low work there."""
    shape = "cpus:0.5;mem:256"  # four fill the unreserved half exactly: no scraps offered
    h = CoreHarness(fair_share_preemption_timeout_seconds=2.0)
    agent = h.agent(AGENT)
    a = h.framework("a", role="a", capabilities=[REVOCABLE_CAPABILITY])
    h.advance(0.1)
    [lent] = _revocable(a.offers())
    [ordinary] = [o for o in a.offers() if not o.revocable]
    names = {"low-1": 0, "low-2": 0, "high-1": 5, "high-2": 5}
    # Lent room is refused until just after the kill below (a holds no offer until then).
    a.call("Decline", offer_ids=[lent.offer_id], filters={"refuse_seconds": 2.75})
    a.accept([ordinary.offer_id], [task(n, shape, priority=p) for n, p in names.items()])
    for name in names:
        agent.status(a.framework_id, name, common_pb2.TASK_RUNNING)
    a.call("Demand", unmet=Resources.parse(shape).to_proto(), priority=3)

    def wait(seconds: float) -> None:  # a declines lent room it has no use for
        for _ in range(round(seconds / 0.25)):
            if _revocable(a.offers()):
                a.call("Decline", offer_ids=[o.offer_id for o in _revocable(a.offers())],
                       filters={"refuse_seconds": 1000})  # fmt: skip
            h.advance(0.25)

    wait(2.5)
    [first] = agent.inbox.of("kill_task")
    assert names[first.task_id] == 0
    agent.status(a.framework_id, first.task_id, common_pb2.TASK_KILLED, reason=REASON_PREEMPTED)
    [freed] = [o for o in a.offers() if not o.revocable]
    h.advance(0.5)  # past the refusal: a Revive has the lent room offered again
    a.call("Revive")
    [lent] = _revocable(a.offers())  # a priority-0 task goes there
    a.accept([lent.offer_id], [task("spot", "cpus:0.5;mem:64", priority=0)])
    agent.status(a.framework_id, "spot", common_pb2.TASK_RUNNING)
    h.advance(0.5)  # the master looks before the freed room is used
    a.accept([freed.offer_id], [task("urgent-1", shape, priority=3)])
    agent.status(a.framework_id, "urgent-1", common_pb2.TASK_RUNNING)
    wait(1.0)
    kills = [k.task_id for k in agent.inbox.of("kill_task")]
    assert sorted(kills) == ["low-1", "low-2"]  # the second priority-3 task is served too
