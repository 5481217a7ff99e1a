"""Optimistic offers and holds on the master's state machine (CoreHarness: paused clock, no
gRPC). The same resources offered to several frameworks, the first Accept wins, the loser's
offer is rescinded and its Accept fails with ABORTED; the fairness rule; holds met, expired,
released and refused."""

from __future__ import annotations

import grpc
import pytest
from core_harness import CoreHarness, task

from agora.common import Resources
from agora.master import views
from agora.master.errors import CallError, Reason
from agora.v1 import common_pb2, scheduler_pb2

AGENT = "cpus:4;mem:4096"


def optimistic(**config) -> CoreHarness:
    return CoreHarness(offer_mode="optimistic", optimistic_grace_seconds=0.0, **config)


def books_balance(h: CoreHarness) -> None:
    """Nothing double-booked: on every agent the tasks' resources fit its total, and what the
    allocator counts as in use is exactly the tasks', held offers' and holds' (optimistic
    offers hold nothing)."""
    for agent_id, agent in h.core.reg.agents.items():
        used = Resources()
        for t in h.core.reg.tasks_of_agent(agent_id):
            used = used + t.resources
        assert agent.total.contains(used)
        allocated = Resources()
        for res in h.core.allocator.agent_allocations(agent_id).values():
            allocated = allocated + res
        held = Resources()
        for offer in h.core.reg.offers_of_agent(agent_id):
            if offer.exclusive:
                held = held + offer.resources
        for hold in h.core.allocator._holds.values():  # what holds collect counts too
            if agent_id in hold.taken:
                held = held + hold.taken[agent_id][0]
        assert allocated == used + held, (allocated, used, held)
        assert h.core.allocator.free(agent_id) + allocated == agent.total


def test_the_same_free_resources_are_offered_to_several_frameworks_at_once():
    h = optimistic()
    agent = h.agent(AGENT)
    a, b, c = h.framework("a"), h.framework("b"), h.framework("c")
    for framework in (a, b, c):
        [offer] = framework.offers()
        assert offer.agent_id == agent.agent_id
        assert Resources.from_proto(offer.resources) == agent.resources
    # Offers hold nothing: the agent is still all free.
    assert h.core.allocator.free(agent.agent_id) == agent.resources
    books_balance(h)


def test_the_fanout_caps_how_many_frameworks_share_an_offer():
    h = optimistic(optimistic_fanout=2)
    h.agent(AGENT)
    frameworks = [h.framework(name) for name in ("a", "b", "c")]
    offered = [f for f in frameworks if f.offers()]
    assert len(offered) == 2


def test_the_first_accept_wins_and_the_loser_is_rescinded_and_aborted():
    h = optimistic()
    agent = h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a], [offer_b] = a.offers(), b.offers()
    a.accept([offer_a.offer_id], [task("ta", "cpus:3;mem:1024")])
    agent.inbox.expect("run_task", lambda r: r.task.task_id == "ta")
    # b's offer asked for more than is left: rescinded at once, and a fresh one for the rest.
    assert offer_b.offer_id in {r.offer_id for r in b.inbox.of("rescind")}
    with pytest.raises(CallError) as e:
        b.accept([offer_b.offer_id], [task("tb", "cpus:1;mem:128")])
    assert e.value.code == grpc.StatusCode.ABORTED
    assert e.value.reason == Reason.OFFER_CONFLICT
    assert "taken first by another framework" in e.value.message
    assert not agent.inbox.of("run_task")[1:]  # nothing launched for b
    [fresh] = b.offers()
    assert Resources.from_proto(fresh.resources) == Resources.parse("cpus:1;mem:3072")
    b.accept([fresh.offer_id], [task("tb", "cpus:1;mem:128")])
    agent.inbox.expect("run_task", lambda r: r.task.task_id == "tb")
    assert h.core.counts.accepts_aborted == 1 and h.core.counts.offers_conflicted >= 1
    books_balance(h)


def test_an_offer_that_still_fits_after_another_accept_stays_valid():
    h = optimistic()
    agent = h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a] = a.offers()
    # b declines its first offer so that it holds only the fresh one below.
    [offer_b] = b.offers()
    b.call("Decline", offer_ids=[offer_b.offer_id], filters=common_pb2.Filters(refuse_seconds=0))
    [offer_b] = b.offers()
    a.accept([offer_a.offer_id], [task("ta", "cpus:1;mem:128")])
    # a's task took part of what b was offered: b's offer of the whole agent cannot be met.
    assert offer_b.offer_id in {r.offer_id for r in b.inbox.of("rescind")}
    [rest] = b.offers()
    assert Resources.from_proto(rest.resources) == Resources.parse("cpus:3;mem:3968")
    agent.inbox.expect("run_task")
    books_balance(h)


def test_an_ended_task_tops_up_the_frameworks_holding_offers():
    h = optimistic()
    agent = h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a] = a.offers()
    a.accept([offer_a.offer_id], [task("ta", "cpus:2;mem:1024")])
    [rest_b] = b.offers()
    assert Resources.from_proto(rest_b.resources) == Resources.parse("cpus:2;mem:3072")
    agent.status(a.framework_id, "ta", common_pb2.TASK_FINISHED)
    # b keeps its offer and is offered what freed up beyond it; it may merge both.
    live = b.offers()
    assert rest_b.offer_id in {o.offer_id for o in live}
    total = Resources()
    for offer in live:
        total = total + Resources.from_proto(offer.resources)
    assert total == agent.resources
    b.accept([o.offer_id for o in live], [task("tb", "cpus:4;mem:4096")])
    books_balance(h)


def test_a_framework_below_its_fair_share_has_priority_for_the_grace_period():
    h = CoreHarness(offer_mode="optimistic", optimistic_grace_seconds=1.0)
    agents = [h.agent(AGENT, hostname=f"h{i}") for i in range(2)]
    big = h.framework("big")
    # big takes one whole agent: its share is 0.5, its fair share (alone) 1.0.
    offers = big.offers()
    first = next(o for o in offers if o.agent_id == agents[0].agent_id)
    big.accept([first.offer_id], [task("b1", AGENT)])
    small = h.framework("small")  # share 0, fair share 0.5: below; big is now at its fair share
    [small_offer] = small.offers()
    [big_offer] = big.offers()
    assert small_offer.agent_id == big_offer.agent_id == agents[1].agent_id
    # big would go above its fair share by taking what small, below its share, was just offered.
    with pytest.raises(CallError) as e:
        big.accept([big_offer.offer_id], [task("b2", "cpus:1;mem:128")])
    assert e.value.code == grpc.StatusCode.ABORTED
    assert e.value.reason == Reason.BELOW_SHARE_PRIORITY
    assert float(e.value.metadata["retry_after_seconds"]) == pytest.approx(1.0, abs=0.01)
    # small takes it first: it wins, big's offer is rescinded.
    small.accept([small_offer.offer_id], [task("s1", "cpus:1;mem:128")])
    assert big_offer.offer_id in {r.offer_id for r in big.inbox.of("rescind")}
    books_balance(h)


def test_after_the_grace_period_a_slow_framework_loses_its_priority():
    h = CoreHarness(offer_mode="optimistic", optimistic_grace_seconds=1.0)
    agents = [h.agent(AGENT, hostname=f"h{i}") for i in range(2)]
    big = h.framework("big")
    first = next(o for o in big.offers() if o.agent_id == agents[0].agent_id)
    big.accept([first.offer_id], [task("b1", AGENT)])
    small = h.framework("small")
    [small_offer] = small.offers()
    h.advance(1.2)  # small is slow to decide
    [big_offer] = big.offers()
    big.accept([big_offer.offer_id], [task("b2", "cpus:1;mem:128")])
    with pytest.raises(CallError) as e:
        small.accept([small_offer.offer_id], [task("s1", "cpus:4;mem:128")])
    assert e.value.reason == Reason.OFFER_CONFLICT
    books_balance(h)


def test_a_framework_within_its_fair_share_is_never_held_back():
    h = CoreHarness(offer_mode="optimistic", optimistic_grace_seconds=10.0)
    h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a], [offer_b] = a.offers(), b.offers()
    # Half the agent is a's fair share (0.5): it may take it though b is below its share.
    a.accept([offer_a.offer_id], [task("ta", "cpus:2;mem:1024")])
    assert offer_b.offer_id in {r.offer_id for r in b.inbox.of("rescind")}


# --- holds -----------------------------------------------------------------------------------


def decline(framework, refuse_seconds: float = 5.0) -> None:
    """Declines every live offer of `framework`, filtering their agents for `refuse_seconds`."""
    for offer in framework.offers():
        filters = common_pb2.Filters(refuse_seconds=refuse_seconds)
        framework.call("Decline", offer_ids=[offer.offer_id], filters=filters)


def hold(framework, count: int, size: str, **fields) -> str:
    request = dict(count=count, resources=Resources.parse(size).to_proto(), **fields)
    reply = framework.call("Hold", **request)
    return reply


@pytest.mark.parametrize("mode", ["pessimistic", "optimistic"])
def test_a_hold_collects_freed_resources_and_offers_them_in_one_go(mode):
    h = CoreHarness(offer_mode=mode, optimistic_grace_seconds=0.0)
    agents = [h.agent("cpus:2;mem:2048", hostname=f"h{i}") for i in range(4)]
    small = h.framework("small")
    # small fills the cluster with 1-cpu tasks, two per agent.
    n = 0
    while offers := small.offers():
        for offer in offers:
            if Resources.from_proto(offer.resources).scalar("cpus") >= 1:
                small.accept([offer.offer_id], [task(f"s{n}", "cpus:1;mem:256")], refuse_seconds=0)
                n += 1
            else:
                small.call("Decline", offer_ids=[offer.offer_id])
    assert n == 8
    gang = h.framework("gang")
    for offer in gang.offers():
        gang.call("Decline", offer_ids=[offer.offer_id])
    hold_id = hold(gang, 4, "cpus:1;mem:256", timeout_seconds=30)
    # Tasks end one by one; each freed cpu goes to the hold, not back to small.
    ended = [t for t in h.core.reg.tasks.values()][:4]
    for i, ending in enumerate(ended):
        agent = next(a for a in agents if a.agent_id == ending.agent_id)
        agent.status(small.framework_id, ending.task_id, common_pb2.TASK_FINISHED)
        if i < 3:  # collected, not offered to anyone
            assert not [o for o in small.offers() if o.agent_id == agent.agent_id]
            assert not gang.inbox.of("hold")
    met = gang.inbox.expect("hold")
    assert met.hold_id == hold_id and met.state == scheduler_pb2.HOLD_MET
    assert {o.offer_id for o in met.offers} <= {o.offer_id for o in gang.offers()}
    held = Resources()
    for offer in met.offers:
        held = held + Resources.from_proto(offer.resources)
    assert held == Resources.parse("cpus:4;mem:1024")
    # Held offers cannot be lost to another framework: they launch.
    for offer in met.offers:
        res = Resources.from_proto(offer.resources)
        gang.accept([offer.offer_id], [task(f"g-{offer.offer_id}", str(res))])
    assert h.core.counts.holds_met == 1
    books_balance(h)


def test_a_hold_on_distinct_agents_takes_one_task_per_agent():
    h = CoreHarness()
    agents = [h.agent("cpus:4;mem:4096", hostname=f"h{i}") for i in range(3)]
    gang = h.framework("gang")
    for offer in gang.offers():
        gang.call("Decline", offer_ids=[offer.offer_id])
    hold_id = hold(gang, 3, "cpus:1;mem:128", distinct_agents=True)
    met = gang.inbox.expect("hold")
    assert met.hold_id == hold_id
    assert sorted(o.agent_id for o in met.offers) == sorted(a.agent_id for a in agents)


def test_a_hold_that_times_out_releases_what_it_collected():
    h = CoreHarness()
    agent = h.agent("cpus:4;mem:4096")
    small, gang = h.framework("small"), h.framework("gang")
    [offer] = small.offers()
    small.accept([offer.offer_id], [task("s1", "cpus:3;mem:256")], refuse_seconds=0)
    for f in (gang, small):
        for offer in f.offers():
            f.call(
                "Decline", offer_ids=[offer.offer_id], filters=common_pb2.Filters(refuse_seconds=60)
            )
    hold_id = hold(gang, 2, "cpus:1;mem:256", timeout_seconds=2)
    assert h.core.allocator.hold(hold_id).remaining == 1  # one cpu was free: taken
    h.advance(2.5)
    ended = gang.inbox.expect("hold")
    assert (ended.hold_id, ended.state) == (hold_id, scheduler_pb2.HOLD_EXPIRED)
    assert "1 of 2" in ended.message
    assert h.core.counts.holds_expired == 1
    # What it held is free again, and offered again (gang revives its filters).
    assert h.core.allocator.free(agent.agent_id) == Resources.parse("cpus:1;mem:3840")
    gang.call("Revive")
    offered = Resources()
    for offer in gang.offers():
        offered = offered + Resources.from_proto(offer.resources)
    assert offered == Resources.parse("cpus:1;mem:3840")


def test_a_hold_above_the_fair_share_or_that_can_never_fit_is_refused():
    h = CoreHarness()
    h.agent("cpus:4;mem:4096", hostname="h0")
    h.agent("cpus:4;mem:4096", hostname="h1")
    a, b = h.framework("a"), h.framework("b")
    for f in (a, b):
        for offer in f.offers():
            f.call("Decline", offer_ids=[offer.offer_id])
    with pytest.raises(CallError) as e:
        hold(a, 5, "cpus:1;mem:128")  # 5 of 8 cpus: above a fair share of 0.5
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.reason == Reason.HOLD_REFUSED
    assert "fair share 0.500" in e.value.message
    hold(a, 4, "cpus:1;mem:128")  # exactly its share: taken
    with pytest.raises(CallError) as e:
        hold(b, 3, "cpus:1;mem:128", distinct_agents=True)
    assert "can never fit" in e.value.message
    with pytest.raises(CallError) as e:
        hold(b, 1, "cpus:5;mem:128")
    assert "can never fit" in e.value.message
    with pytest.raises(CallError) as e:
        hold(b, 1, "cpus:1", timeout_seconds=10_000)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "--max-hold" in e.value.message


def test_a_released_hold_and_a_disconnected_framework_give_back_what_they_held():
    h = CoreHarness()
    agent = h.agent("cpus:4;mem:4096")
    other = h.framework("other")
    [offer] = other.offers()
    other.accept([offer.offer_id], [task("busy", "cpus:3;mem:128")], refuse_seconds=60)
    gang = h.framework("gang")
    for offer in gang.offers():  # the rest of the agent
        gang.call(
            "Decline", offer_ids=[offer.offer_id], filters=common_pb2.Filters(refuse_seconds=60)
        )
    hold_id = hold(gang, 2, "cpus:1;mem:128")
    assert h.core.allocator.hold(hold_id).remaining == 1  # took the free cpu
    assert h.core.allocator.free(agent.agent_id).scalar("cpus") == 0
    gang.call("ReleaseHold", hold_id=hold_id)
    released = gang.inbox.expect("hold")
    assert (released.hold_id, released.state) == (hold_id, scheduler_pb2.HOLD_RELEASED)
    with pytest.raises(CallError) as e:
        gang.call("ReleaseHold", hold_id=hold_id)
    assert e.value.reason == Reason.HOLD_UNKNOWN
    assert h.core.allocator.free(agent.agent_id).scalar("cpus") == 1
    second = hold(gang, 2, "cpus:1;mem:128")
    assert h.core.allocator.hold(second).remaining == 1
    gang.close()  # a hold ends with its framework's subscription
    assert h.core.allocator.hold(second) is None
    assert h.core.allocator.free(agent.agent_id).scalar("cpus") == 1


def test_the_cluster_view_in_optimistic_mode_counts_offers_apart_from_used():
    h = optimistic()
    h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a] = a.offers()
    a.accept([offer_a.offer_id], [task("ta", "cpus:1;mem:128")])
    assert b.offers()
    view = views.cluster_view(h.core)
    [row] = view.agents
    used = Resources.from_proto(row.used)
    assert used == Resources.parse("cpus:1;mem:128")
    assert Resources.from_proto(row.free) + used == Resources.from_proto(row.total)


# --- found in review -------------------------------------------------------------------------


def test_a_quota_limit_holds_under_optimistic_offers():
    from agora.v1 import operator_pb2

    h = optimistic()
    for i in range(3):
        h.agent(AGENT, hostname=f"h{i}")
    limit = operator_pb2.Quota(limit=Resources.parse("cpus:4;mem:4096").to_proto())
    h.call(h.core.set_quota, "lim", limit)
    f = h.framework("f", role="lim")
    launched, refused = 0, 0
    for i, offer in enumerate(f.offers()):
        try:
            f.accept([offer.offer_id], [task(f"t{i}", "cpus:4;mem:1024")])
            launched += 1
        except CallError as e:
            assert e.reason == Reason.OFFER_CONFLICT and "quota" in e.message
            refused += 1
    used = Resources()
    for t in h.core.reg.tasks.values():
        used = used + t.resources
    assert launched == 1 and used.scalar("cpus") == 4  # never beyond the limit


def test_a_frameworks_merged_offers_are_rescinded_when_together_they_no_longer_fit():
    h = optimistic()
    agent = h.agent(AGENT)
    a, b = h.framework("a"), h.framework("b")
    [offer_a] = a.offers()
    a.accept([offer_a.offer_id], [task("ta", "cpus:2;mem:1024")], refuse_seconds=0)
    [first] = b.offers()  # the rest: cpus 2
    agent.status(a.framework_id, "ta", common_pb2.TASK_FINISHED)
    assert len(b.offers()) == 2  # and a top-up of what ta gave back
    fresh_a = a.offers()[0]
    a.accept([fresh_a.offer_id], [task("ta2", "cpus:1;mem:128")])
    # Each of b's offers alone still fits the 3 cpus left, both together do not: both go,
    # and b is offered what is left.
    rescinded = {r.offer_id for r in b.inbox.of("rescind")}
    assert first.offer_id in rescinded
    [rest] = b.offers()
    assert Resources.from_proto(rest.resources).scalar("cpus") == 3
    books_balance(h)


def test_a_hold_gives_back_what_it_took_on_an_agent_that_drains():
    h = CoreHarness()
    agents = [h.agent(AGENT, hostname=f"h{i}") for i in range(4)]
    busy = h.framework("busy")
    for i, offer in enumerate(busy.offers()):
        busy.accept([offer.offer_id], [task(f"b{i}", AGENT)])
    gang = h.framework("gang")
    hold_id = hold(gang, 2, "cpus:4;mem:1024")
    by_id = {a.agent_id: a for a in agents}
    first = h.core.reg.tasks[(busy.framework_id, "b0")]
    by_id[first.agent_id].status(busy.framework_id, "b0", common_pb2.TASK_FINISHED)
    assert h.core.allocator.hold(hold_id).remaining == 1
    h.call(h.core.agents.drain, first.agent_id)
    assert h.core.allocator.hold(hold_id).remaining == 2  # given back: it is draining
    second = h.core.reg.tasks[(busy.framework_id, "b1")]
    by_id[second.agent_id].status(busy.framework_id, "b1", common_pb2.TASK_FINISHED)
    assert not [e for e in gang.inbox.of("hold") if e.state == scheduler_pb2.HOLD_MET]
    books_balance(h)


def test_a_hold_ends_when_its_framework_fails_over():
    h = CoreHarness()
    h.agent(AGENT)
    busy = h.framework("busy")
    [offer] = busy.offers()
    busy.accept([offer.offer_id], [task("b0", "cpus:4;mem:1024")])
    gang = h.framework("gang")
    hold_id = hold(gang, 2, "cpus:1;mem:128")
    gang.subscribe(framework_id=gang.framework_id)  # a new scheduler, the old stream open
    assert h.core.allocator.hold(hold_id) is None
