"""The master's scenarios on CoreHarness: the state machine with a paused clock, no gRPC and no
sleeps. Offer, accept, decline with filters, suppress and revive, kill, reconcile, teardown,
DRF between frameworks, acknowledgements, failover and its timeout, agent loss, adopted tasks.
"""

from __future__ import annotations

import grpc
import pytest
from core_harness import CoreHarness, task

from agora.common import Resources
from agora.master import views
from agora.master.errors import CallError
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2


@pytest.fixture
def h():
    return CoreHarness()


@pytest.fixture
def agent(h):
    return h.agent()


@pytest.fixture
def framework(h):
    return h.framework()


def launch_one(framework, agent, task_id: str = "t1"):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task(task_id)], refuse_seconds=0)
    agent.inbox.expect("run_task", lambda r: r.task.task_id == task_id)
    agent.status(framework.framework_id, task_id, common_pb2.TASK_RUNNING)
    framework.inbox.expect("update", lambda u: u.status.task_id == task_id)
    return offer


# --- offers and launches ----------------------------------------------------------------


def test_an_offer_names_the_agent_and_all_its_resources(h, agent, framework):
    [offer] = framework.offers()
    assert (offer.agent_id, offer.framework_id) == (agent.agent_id, framework.framework_id)
    assert offer.hostname == "host-a"
    assert Resources.from_proto(offer.resources) == agent.resources


def test_unused_part_of_an_accepted_offer_and_ended_tasks_are_offered_again(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1", "cpus:1;mem:128")], refuse_seconds=0)
    agent.inbox.expect("run_task")
    # The rest of the agent comes back as a new offer.
    [later] = framework.offers()
    rest = Resources.from_proto(later.resources)
    assert rest.scalar("cpus") == 3 and rest.scalar("mem") == 4096 - 128

    n = len(framework.inbox.items)
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    # The finished task's resources are offered again.
    freed = framework.inbox.expect(
        "offers",
        lambda b: any(Resources.from_proto(o.resources).scalar("cpus") == 1 for o in b.offers),
        after=n,
    )
    assert freed


def test_decline_filter_hides_the_agent_until_it_expires_or_a_revive(h, agent, framework):
    [offer] = framework.offers()
    cycles = h.cycles
    framework.call(
        "Decline", offer_ids=[offer.offer_id], filters=common_pb2.Filters(refuse_seconds=60)
    )
    assert h.cycles > cycles  # a cycle ran with the agent's resources free ...
    assert not framework.offers()  # ... and the filter kept them from the framework
    assert not views.cluster_state(h.core, "").agents[0].offered
    h.advance(59)
    assert not framework.offers()
    h.advance(1.5)  # the filter expires: the agent is offered again without a revive
    [again] = framework.offers()
    assert again.agent_id == agent.agent_id and again.offer_id != offer.offer_id

    framework.call(
        "Decline", offer_ids=[again.offer_id], filters=common_pb2.Filters(refuse_seconds=3600)
    )
    assert not framework.offers()
    framework.call("Revive")
    [revived] = framework.offers()
    assert revived.agent_id == agent.agent_id


def test_suppress_stops_offers_and_revive_restores_them(h, framework):
    framework.call("Suppress")
    h.agent()  # its registration runs a cycle with its resources free
    assert views.framework_summaries(h.core)[0].suppressed
    assert not framework.inbox.of("offers")
    framework.call("Revive")
    assert framework.offers()


def test_drf_spreads_agents_over_two_frameworks(h):
    # Both frameworks wait with no resources; each agent goes to the one with the lower share.
    f1, f2 = h.framework("one"), h.framework("two")
    agents = [h.agent(hostname=f"h{i}") for i in range(2)]
    [o1], [o2] = f1.offers(), f2.offers()
    assert {o1.agent_id, o2.agent_id} == {a.agent_id for a in agents}


def test_an_offer_outliving_the_offer_timeout_is_rescinded_and_offered_again():
    h = CoreHarness(offer_timeout_seconds=5)
    h.agent()
    framework = h.framework()
    [offer] = framework.offers()
    h.advance(4.9)
    assert framework.offers() == [offer]
    h.advance(0.5)
    rescind = framework.inbox.expect("rescind")
    assert rescind.offer_id == offer.offer_id
    [again] = framework.offers()  # back in the pool, and offered afresh
    assert again.offer_id != offer.offer_id
    assert h.core.counts.offers_timed_out == 1


# --- kills, acknowledgements, reconciliation -------------------------------------------


def test_kill_reaches_the_agent_and_unknown_task_is_lost(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")])
    agent.inbox.expect("run_task")
    framework.call("Kill", task_id="t1", grace_period_seconds=2)
    kill = agent.inbox.expect("kill_task")
    assert (kill.task_id, kill.grace_period_seconds) == ("t1", 2)

    framework.call("Kill", task_id="nope")
    lost = framework.inbox.expect("update", lambda u: u.status.task_id == "nope")
    assert lost.status.state == common_pb2.TASK_LOST
    assert not lost.status.uuid


def test_kill_of_a_task_that_already_finished_reports_how_it_ended(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")])
    agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    seen = len(framework.inbox.items)
    framework.call("Kill", task_id="t1")
    answer = framework.inbox.expect("update", after=seen)
    assert (answer.status.task_id, answer.status.state) == ("t1", common_pb2.TASK_FINISHED)
    assert not agent.inbox.of("kill_task")


def test_update_is_relayed_and_its_ack_reaches_the_agent(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")])
    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    update = framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
    assert (update.status.state, update.status.uuid) == (common_pb2.TASK_RUNNING, uuid)
    assert update.status.agent_id == agent.agent_id
    assert framework.call("Acknowledge", agent_id=agent.agent_id, task_id="t1", uuid=uuid) == 1
    ack = agent.inbox.expect("status_update_ack")
    assert (ack.framework_id, ack.task_id, ack.uuid) == (framework.framework_id, "t1", uuid)
    [summary] = views.task_summaries(h.core)
    assert (summary.task_id, summary.state) == ("t1", common_pb2.TASK_RUNNING)


def test_reconcile_explicit_and_implicit(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("a"), task("b")])
    agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "a", common_pb2.TASK_RUNNING)
    framework.inbox.expect("update", lambda u: u.status.task_id == "a")

    n = len(framework.inbox.items)
    Wanted = scheduler_pb2.ReconcileRequest.Task
    framework.call("Reconcile", tasks=[Wanted(task_id="a"), Wanted(task_id="ghost")])
    a = framework.inbox.expect("update", lambda u: u.status.task_id == "a", after=n)
    ghost = framework.inbox.expect("update", lambda u: u.status.task_id == "ghost", after=n)
    assert a.status.state == common_pb2.TASK_RUNNING
    assert a.status.reason == "REASON_RECONCILIATION" and not a.status.uuid
    assert ghost.status.state == common_pb2.TASK_UNKNOWN

    n = len(framework.inbox.items)
    framework.call("Reconcile")
    b = framework.inbox.expect("update", lambda u: u.status.task_id == "b", after=n)
    assert b.status.state == common_pb2.TASK_STAGING
    framework.inbox.expect("update", lambda u: u.status.task_id == "a", after=n)


def test_reconcile_answers_carry_the_last_health_verdict(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("sick"), task("unchecked")])
    agent.status(framework.framework_id, "sick", common_pb2.TASK_RUNNING, healthy=False)
    agent.status(framework.framework_id, "unchecked", common_pb2.TASK_RUNNING)

    n = len(framework.inbox.items)
    framework.call("Reconcile")
    sick = framework.inbox.expect("update", lambda u: u.status.task_id == "sick", after=n)
    unchecked = framework.inbox.expect("update", lambda u: u.status.task_id == "unchecked", after=n)
    assert sick.status.reason == "REASON_RECONCILIATION"
    assert sick.status.HasField("healthy") and sick.status.healthy is False
    # No health check reported: the answer says nothing about health, rather than "unhealthy".
    assert not unchecked.status.HasField("healthy")


def test_a_task_id_is_reusable_only_once_its_final_update_is_acknowledged(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")], refuse_seconds=0)
    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    # The agent keeps the run until the ack and would ignore a relaunch: refused meanwhile.
    offer = framework.offers()[0]
    with pytest.raises(CallError) as e:
        framework.accept([offer.offer_id], [task("t1")])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "not acknowledged" in e.value.message
    framework.call("Acknowledge", agent_id=agent.agent_id, task_id="t1", uuid=uuid)
    seen = len(agent.inbox.items)
    framework.accept([offer.offer_id], [task("t1")])
    run = agent.inbox.expect("run_task", after=seen)
    assert run.task.task_id == "t1"


def test_one_acknowledge_call_acknowledges_every_update_it_carries(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task(f"t{i}") for i in (1, 2, 3)], refuse_seconds=0)
    uuids = {
        "t1": agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING),
        "t2": agent.status(framework.framework_id, "t2", common_pb2.TASK_RUNNING),
        "t3": agent.status(framework.framework_id, "t3", common_pb2.TASK_FINISHED),
    }
    Ack = scheduler_pb2.Acknowledgement
    framework.call(
        "Acknowledge",
        agent_id=agent.agent_id,
        task_id="t1",
        uuid=uuids["t1"],
        acknowledgements=[
            Ack(agent_id=agent.agent_id, task_id="t2", uuid=uuids["t2"]),
            Ack(agent_id=agent.agent_id, task_id="t-lost"),  # master-generated: ignored
            Ack(agent_id=agent.agent_id, task_id="t3", uuid=uuids["t3"]),
        ],
    )
    acks = agent.inbox.of("status_update_ack")
    assert sorted((a.framework_id, a.task_id, a.uuid) for a in acks) == sorted(
        (framework.framework_id, task_id, uuid) for task_id, uuid in uuids.items()
    )
    # The final update of t3 is acknowledged too, so its id may be launched again.
    rest = framework.offers()[0]
    seen = len(agent.inbox.items)
    framework.accept([rest.offer_id], [task("t3")])
    run = agent.inbox.expect("run_task", after=seen)
    assert run.task.task_id == "t3"


def test_a_stale_update_after_the_final_one_is_acked_but_not_forwarded(h, agent, framework):
    """An agent that lost an ack in a machine crash resends an older update: the framework,
    which already has the task's final state, never sees the task 'running' again."""
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")])
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    seen = len(framework.inbox.items)
    stale = agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    ack = agent.inbox.expect("status_update_ack", lambda a: a.uuid == stale)
    assert ack.task_id == "t1"
    # A duplicate of the final update still goes through (the framework may need it again).
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FAILED)
    since = [m.update for m in framework.inbox.items[seen:] if m.HasField("update")]
    assert [u.status.state for u in since] == [common_pb2.TASK_FAILED]


# --- teardown and failover ----------------------------------------------------------------


def test_teardown_shuts_the_framework_down_on_agents(h, agent, framework):
    [offer] = framework.offers()
    framework.accept([offer.offer_id], [task("t1")])
    framework.call("Teardown")
    shutdown = agent.inbox.expect("shutdown_framework")
    assert shutdown.framework_id == framework.framework_id
    assert "removed" in framework.inbox.expect("error").message
    assert framework.inbox.closed
    with pytest.raises(CallError) as e:
        framework.call("Revive")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    # The agent's TASK_KILLED for a removed framework is acknowledged by the master itself.
    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_KILLED)
    ack = agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid)
    assert ack.task_id == "t1"
    # Its ended task is still listed under the framework's name (`agora task logs`).
    [ended] = [t for t in views.task_summaries(h.core) if t.task_id == "t1"]
    assert (ended.framework_name, ended.state) == ("test-fw", common_pb2.TASK_KILLED)


def test_framework_failover_keeps_id_and_ends_old_stream(h):
    first = h.framework()
    old_stream = first.stream_id
    second = h.framework()
    second.subscribe(framework_id=first.framework_id)
    assert second.framework_id == first.framework_id
    assert second.stream_id != old_stream
    assert "failed over" in first.inbox.expect("error").message
    assert first.inbox.closed
    with pytest.raises(CallError) as e:
        first.call("Revive")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    second.call("Revive")


def test_framework_gone_past_failover_timeout_is_torn_down(h, agent):
    framework = h.framework(failover_timeout=30)
    launch_one(framework, agent)
    framework.close()
    h.advance(29.9)
    assert not agent.inbox.of("shutdown_framework")  # within its failover timeout
    h.advance(0.2)
    shutdown = agent.inbox.expect("shutdown_framework")
    assert shutdown.framework_id == framework.framework_id
    with pytest.raises(CallError) as e:
        h.framework().subscribe(framework_id=framework.framework_id)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_a_framework_back_within_its_failover_timeout_keeps_its_tasks(h, agent):
    framework = h.framework(failover_timeout=30)
    launch_one(framework, agent)
    framework.close()
    h.advance(20)
    framework.subscribe(framework_id=framework.framework_id)
    h.advance(60)  # its old timer was cancelled
    assert not agent.inbox.of("shutdown_framework")
    [summary] = views.task_summaries(h.core)
    assert (summary.task_id, summary.state) == ("t1", common_pb2.TASK_RUNNING)
    assert h.clock.pending() == 0


def test_failover_with_the_gpu_capability_gets_gpu_agents_offered(h):
    agent = h.agent("cpus:4;mem:1024;gpus:1")
    first = h.framework()
    explained = h.core.explain_offers(first.framework_id)
    assert any("GPU_RESOURCES" in reason for reason in explained), explained
    assert not first.inbox.of("offers")
    second = h.framework(capabilities=["GPU_RESOURCES"], subscribe=False)
    second.subscribe(framework_id=first.framework_id)
    [offer] = second.offers()
    assert offer.agent_id == agent.agent_id


# --- agents lost and found ----------------------------------------------------------------


def test_silent_agent_is_removed_after_the_timeout_with_rescind_lost_and_failure(h, agent):
    framework = h.framework()
    launch_one(framework, agent)
    [rest] = framework.offers()  # the unused part, outstanding
    agent.heartbeating = False  # the stream stays open but the agent says nothing
    h.advance(0.9)
    assert not agent.inbox.of("shutdown")  # silent, but not yet for the agent timeout
    h.advance(0.5)
    assert framework.inbox.expect("rescind").offer_id == rest.offer_id
    lost = framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_LOST)
    assert (lost.status.task_id, lost.status.reason) == ("t1", "REASON_AGENT_REMOVED")
    assert lost.status.source == common_pb2.TaskStatus.SOURCE_MASTER and not lost.status.uuid
    assert framework.inbox.expect("failure").agent_id == agent.agent_id
    assert "removed" in agent.inbox.expect("shutdown").reason
    assert not views.agent_summaries(h.core)


def test_a_heartbeating_agent_is_never_removed(h, agent):
    h.advance(30)
    assert [a.info.agent_id for a in views.agent_summaries(h.core)] == [agent.agent_id]


def test_task_lost_while_the_framework_was_away_is_delivered_on_resubscription(h, agent):
    framework = h.framework()
    launch_one(framework, agent)
    framework.close()
    agent.heartbeating = False
    h.advance(2)
    agent.inbox.expect("shutdown")  # removed: its task is LOST while nobody listens
    framework.subscribe(framework_id=framework.framework_id)
    lost = framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
    assert (lost.status.state, lost.status.reason) == (
        common_pb2.TASK_LOST,
        "REASON_AGENT_REMOVED",
    )


def test_restarted_master_without_state_adopts_reported_tasks(h):
    running = agent_link_pb2.RunningTask(
        framework_id="framework-lost", task=task("t9"), state=common_pb2.TASK_RUNNING
    )
    h.agent(connect=False).connect(tasks=[running], agent_id="agent-from-before")
    framework = h.framework()
    framework.subscribe(framework_id="framework-lost")
    assert framework.framework_id == "framework-lost"
    framework.call("Reconcile")
    update = framework.inbox.expect("update", lambda u: u.status.task_id == "t9")
    assert update.status.state == common_pb2.TASK_RUNNING


def test_agent_reporting_less_than_its_tasks_use_is_kept_without_offers(h):
    running = agent_link_pb2.RunningTask(
        framework_id="framework-x",
        task=task("big", "cpus:3;mem:128"),
        state=common_pb2.TASK_RUNNING,
    )
    h.agent("cpus:1;mem:256", connect=False).connect(tasks=[running], agent_id="agent-shrunk")
    framework = h.framework()
    [t] = views.task_summaries(h.core)
    assert (t.task_id, t.agent_id) == ("big", "agent-shrunk")
    framework.call("Revive")
    h.advance(1)  # cycles ran, on change and on the sweep: still no offer
    assert not framework.inbox.of("offers")


def test_an_agent_reports_only_on_its_own_tasks(h):
    real, impostor = h.agent(), h.agent(hostname="host-b")
    framework = h.framework()
    [offer] = [o for o in framework.offers() if o.agent_id == real.agent_id]
    framework.accept([offer.offer_id], [task("t1")])
    real.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    # A FINISHED from an agent that does not run the task changes nothing.
    impostor.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    # Nor does listing the task in a re-registration move it onto the impostor.
    impostor.close()
    impostor.connect(
        tasks=[
            agent_link_pb2.RunningTask(
                framework_id=framework.framework_id, task=task("t1"), state=common_pb2.TASK_RUNNING
            )
        ],
        agent_id=impostor.agent_id,
    )
    [t1] = [t for t in views.task_summaries(h.core) if t.task_id == "t1"]
    assert (t1.agent_id, t1.state) == (real.agent_id, common_pb2.TASK_RUNNING)
    assert not [
        u for u in framework.inbox.of("update") if u.status.state == common_pb2.TASK_FINISHED
    ]


def test_the_recorder_sees_every_message_in_the_order_sent(h, agent, framework):
    kinds = [
        m.WhichOneof("message") if s is agent.session else m.WhichOneof("event") for s, m in h.sent
    ]
    assert kinds == ["registered", "subscribed", "offers"]


# --- offers at scale ------------------------------------------------------------------------


def test_a_large_round_goes_out_in_events_of_bounded_size_with_every_agent_once(h):
    from agora.master.offer_cycle import OFFERS_PER_EVENT

    agents = [h.agent("cpus:1;mem:64", hostname=f"h{i}") for i in range(2 * OFFERS_PER_EVENT + 7)]
    framework = h.framework()
    events = framework.inbox.of("offers")
    assert [len(e.offers) for e in events] == [OFFERS_PER_EVENT, OFFERS_PER_EVENT, 7]
    offered = [o.agent_id for e in events for o in e.offers]
    assert sorted(offered) == sorted(a.agent_id for a in agents)


async def test_a_sliced_cycle_offers_what_one_cycle_would(h):
    from agora.master.offer_cycle import AGENTS_PER_SLICE, FIRST_SLICE

    h.auto_settle = False  # the master's loop runs the cycle below, in slices
    agents = [h.agent("cpus:1;mem:64", hostname=f"h{i}") for i in range(AGENTS_PER_SLICE + 10)]
    f1, f2 = h.framework("one"), h.framework("two")
    assert not f1.inbox.of("offers") and not f2.inbox.of("offers")
    sent = await h.core.offers.allocate_in_slices(h.core.offers.take_changed())
    assert sent == len(agents)
    # DRF across the slices as within one cycle: the two frameworks get half each.
    assert (len(f1.offers()), len(f2.offers())) == (len(agents) // 2, len(agents) // 2)
    assert not h.core.offers._freed_at  # every free time was looked at
    # The first slice is small, so the first offers go out early: its events carry just it.
    firsts = [f.inbox.of("offers")[0] for f in (f1, f2)]
    assert sum(len(e.offers) for e in firsts) == FIRST_SLICE


def test_an_agent_registering_again_with_new_attributes_is_offered_with_them(h, framework):
    agent = h.agent("cpus:2;mem:64", attributes={"rack": "r1"}, hostname="old")
    [first] = [o for o in framework.offers() if o.agent_id == agent.agent_id]
    assert [(a.name, a.text) for a in first.attributes] == [("rack", "r1")]
    assert first.agent_address == "old:5051"
    agent.attributes, agent.hostname = {"rack": "r2"}, "new"
    agent.resources = Resources.parse("cpus:3;mem:64")
    agent.close()
    agent.connect(agent_id=agent.agent_id)
    [again] = [o for o in framework.offers() if o.agent_id == agent.agent_id]
    assert [(a.name, a.text) for a in again.attributes] == [("rack", "r2")]
    assert (again.hostname, again.agent_address) == ("new", "new:5051")
    assert Resources.from_proto(again.resources) == Resources.parse("cpus:3;mem:64")


# --- a master that falls behind -------------------------------------------------------------


def test_a_master_that_stalled_does_not_remove_agents_whose_heartbeats_waited_for_it(h, agent):
    silent = h.agent(hostname="really-gone")
    silent.heartbeating = False
    h.advance(0.5)
    # The master's loop stalls for 5 s (agent timeout 1 s): no tick, no heartbeat handled.
    h.clock.advance(5.0)
    h.core.agents.tick(0.05)  # the first tick after the stall runs before the queued beats
    h.core.agents.check_silence()
    assert not agent.inbox.of("shutdown") and not silent.inbox.of("shutdown")
    h.advance(0.1)  # the waiting heartbeats are handled
    # Time the master keeps up counts again: the agent that is really gone is removed within
    # the agent timeout of it, the live one never.
    h.advance(1.0)
    assert "removed" in silent.inbox.expect("shutdown").reason
    h.advance(10)
    assert [a.info.agent_id for a in views.agent_summaries(h.core)] == [agent.agent_id]


def test_a_master_behind_turns_new_agents_away_with_a_time_to_come_back(h, agent):
    h.advance(0.5)
    h.clock.advance(3.0)  # stalled: its next tick is 3 s overdue
    newcomer = h.agent(hostname="new", connect=False)
    with pytest.raises(CallError) as e:
        newcomer.connect()
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.value.reason == "MASTER_BUSY"
    assert float(e.value.metadata["retry_after_seconds"]) >= 1.0
    # An agent the master knows is always taken back: its tasks come with it.
    agent.close()
    assert agent.connect(agent_id=agent.agent_id).agent_id == agent.agent_id
    h.advance(0.5)  # caught up
    assert newcomer.connect().agent_id
    assert h.core.counts.agents_refused_busy == 1


def test_a_master_behind_on_reading_judges_silence_net_of_what_waits_in_its_queues():
    h = CoreHarness(agent_timeout_seconds=2.0)
    live = [h.agent(hostname=f"live-{i}") for i in range(20)]
    dead = h.agent(hostname="dead")
    for agent in (*live, dead):
        agent.heartbeating = False  # from now on the master reads them as below
    # The master's loop ticks on time, but it reads the live agents' heartbeats only every
    # 3 s (agent timeout 2 s), each 1.5 s after it was sent: they wait in its gRPC queues.
    for _ in range(4):
        for agent in live:
            h.core.agents.heartbeat(agent.agent, sent_at=h.clock.wall() - 1.5)
        h.advance(3.0)
    assert h.core.agents.intake.lag(h.clock.wall()) == pytest.approx(1.5, abs=0.1)
    assert not any(agent.inbox.of("shutdown") for agent in live)
    assert "removed" in dead.inbox.expect("shutdown").reason  # it said nothing at all
