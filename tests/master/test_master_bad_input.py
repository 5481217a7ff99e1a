"""Bad input gets the right gRPC status and a useful message; the master keeps serving."""

from __future__ import annotations

import math

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.common.rpc import insecure_channel
from agora.v1 import agent_link_pb2, common_pb2, operator_pb2, scheduler_pb2

Code = grpc.StatusCode


@pytest.fixture
async def cluster(tmp_path):
    master = await start_master(tmp_path / "state")
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    [offer] = await framework.offers()
    yield master, agent, framework, offer
    await framework.close()
    await agent.close()
    await master.stop(0)


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    return e.value


def res(name: str, value: float, role: str = "*") -> common_pb2.Resource:
    return common_pb2.Resource(name=name, type=common_pb2.Resource.SCALAR, scalar=value, role=role)


def raw_task(task_id: str, resources, shell: str = "true") -> common_pb2.TaskInfo:
    return common_pb2.TaskInfo(
        task_id=task_id, resources=resources, command=common_pb2.CommandInfo(shell=shell)
    )


BAD_TASKS = {
    "exceeds the offer": ([task("big", "cpus:5;mem:128")], "big", "short of cpus:2"),
    "ports not offered": ([task("p", "cpus:1;mem:32;ports:[40000-40000]")], "p", "40000"),
    "duplicate id in call": ([task("d"), task("d")], "d", "twice"),
    "negative cpus": ([raw_task("n", [res("cpus", -1)])], "n", "negative"),
    "NaN mem": ([raw_task("nan", [res("mem", math.nan)])], "nan", "finite"),
    "unknown resource": ([raw_task("u", [res("bogons", 1)])], "u", "bogons"),
    "no command": (
        [common_pb2.TaskInfo(task_id="c", resources=[res("cpus", 1)])],
        "c",
        "no command",
    ),
    "no resources": ([raw_task("e", [])], "e", "no resources"),
    "empty task id": ([raw_task("", [res("cpus", 1)])], "", "empty task_id"),
    # Issue 35: a task without mem ran with no memory limit, one without cpus uncharged.
    "no mem": ([task("m", "cpus:1;disk:1")], "m", "--min-task-mem"),
    "no cpus": ([task("z", "mem:64;disk:1")], "z", "--min-task-cpus"),
    "too little mem": ([task("t", "cpus:1;mem:1")], "t", "at least 4 MB"),
    "half a gpu": (
        [raw_task("g", [res("cpus", 1), res("mem", 32), res("gpus", 0.5)])],
        "g",
        "whole",
    ),
    "an unknown rlimit": ([task("rl1", rlimits={"bogus": 1})], "task rl1", "unknown 'bogus'"),
    "a bad image name": (
        [task("i", container=common_pb2.ContainerInfo(image="../etc"))],
        "i",
        "not an image name",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
async def test_bad_tasks_are_invalid_and_launch_nothing(cluster, case):
    master, agent, framework, offer = cluster
    tasks, task_id, words = BAD_TASKS[case]
    error = await rpc_error(framework.accept([offer.offer_id], [task("ok"), *tasks]))
    assert error.code() == Code.INVALID_ARGUMENT
    assert task_id in error.details() and words in error.details()
    # Nothing half-done: the good task was not launched and the offer is still valid.
    await framework.accept([offer.offer_id], [task("ok")])
    run = await agent.inbox.expect("run_task")
    assert run.task.task_id == "ok"
    assert len(agent.inbox.of("run_task")) == 1


async def test_duplicate_of_an_active_task_is_invalid(cluster):
    master, agent, framework, offer = cluster
    await framework.accept([offer.offer_id], [task("t1")], refuse_seconds=0)
    [rest] = await framework.offers()
    error = await rpc_error(framework.accept([rest.offer_id], [task("t1")]))
    assert error.code() == Code.INVALID_ARGUMENT and "already used" in error.details()


async def test_unknown_offer_is_not_found(cluster):
    master, agent, framework, offer = cluster
    error = await rpc_error(framework.accept(["offer-nope"], [task("t")]))
    assert error.code() == Code.NOT_FOUND and "offer-nope" in error.details()


async def test_used_offer_is_a_failed_precondition(cluster):
    master, agent, framework, offer = cluster
    await framework.accept([offer.offer_id], [task("t1")])
    error = await rpc_error(framework.accept([offer.offer_id], [task("t2")]))
    assert error.code() == Code.FAILED_PRECONDITION and "already accepted" in error.details()


async def test_declined_offer_is_a_failed_precondition(cluster):
    master, agent, framework, offer = cluster
    await framework.stub.Decline(
        scheduler_pb2.DeclineRequest(**framework.ids(), offer_ids=[offer.offer_id])
    )
    error = await rpc_error(framework.accept([offer.offer_id], [task("t")]))
    assert error.code() == Code.FAILED_PRECONDITION and "declined" in error.details()


async def test_rescinded_offer_is_a_failed_precondition(cluster):
    master, agent, framework, offer = cluster
    await agent.close()  # the agent's stream breaks: its offers are rescinded
    await framework.inbox.expect("rescind", lambda r: r.offer_id == offer.offer_id)
    error = await rpc_error(framework.accept([offer.offer_id], [task("t")]))
    assert error.code() == Code.FAILED_PRECONDITION and "no longer valid" in error.details()


async def test_offer_of_another_framework_is_permission_denied(cluster):
    master, agent, framework, offer = cluster
    other = FakeFramework(master.address, name="other")
    await other.subscribe()
    try:
        error = await rpc_error(other.accept([offer.offer_id], [task("t")]))
        assert error.code() == Code.PERMISSION_DENIED
    finally:
        await other.close()


async def test_offers_on_two_agents_in_one_accept_are_invalid(cluster):
    master, agent, framework, offer = cluster
    second = FakeAgent(master.address, hostname="host-b")
    await second.connect()
    try:
        offers = await framework.offers(2)
        error = await rpc_error(framework.accept([o.offer_id for o in offers], [task("t")]))
        assert error.code() == Code.INVALID_ARGUMENT and "different agents" in error.details()
    finally:
        await second.close()


async def test_calls_on_a_stale_stream_or_unknown_framework_are_refused(cluster):
    master, agent, framework, offer = cluster
    error = await rpc_error(
        framework.stub.Revive(
            scheduler_pb2.ReviveRequest(framework_id=framework.framework_id, stream_id="stream-old")
        )
    )
    assert error.code() == Code.PERMISSION_DENIED and "stream_id" in error.details()
    error = await rpc_error(
        framework.stub.Accept(
            scheduler_pb2.AcceptRequest(
                framework_id="framework-nobody",
                stream_id=framework.stream_id,
                offer_ids=[offer.offer_id],
            )
        )
    )
    assert error.code() == Code.NOT_FOUND


async def test_bad_subscriptions_and_filters_are_invalid(cluster):
    master, agent, framework, offer = cluster
    for info in [
        common_pb2.FrameworkInfo(name=""),
        common_pb2.FrameworkInfo(name="x", failover_timeout_seconds=-1),
        common_pb2.FrameworkInfo(name="x", role="bad role"),
        common_pb2.FrameworkInfo(name="x", service_address="nohostport"),
    ]:
        call = framework.stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        error = await rpc_error(call.read())
        assert error.code() == Code.INVALID_ARGUMENT, info
    error = await rpc_error(
        framework.stub.Decline(
            scheduler_pb2.DeclineRequest(
                **framework.ids(),
                offer_ids=[offer.offer_id],
                filters=common_pb2.Filters(refuse_seconds=-5),
            )
        )
    )
    assert error.code() == Code.INVALID_ARGUMENT and "refuse_seconds" in error.details()


async def test_bad_agents_are_refused(cluster):
    master, agent, framework, offer = cluster
    bad = FakeAgent(master.address, hostname="bad")
    bad.resources = type(bad.resources)()  # replaced below with a raw negative resource
    channel = insecure_channel(master.address)
    from agora.v1 import agent_link_pb2_grpc

    stub = agent_link_pb2_grpc.AgentLinkStub(channel)
    Msg = agent_link_pb2.AgentMessage

    async def one(message):
        yield message

    call = stub.Connect(
        one(
            Msg(
                register=Msg.Register(
                    info=common_pb2.AgentInfo(hostname="bad", resources=[res("cpus", -2)])
                )
            )
        )
    )
    error = await rpc_error(call.read())
    assert error.code() == Code.INVALID_ARGUMENT and "negative" in error.details()
    call = stub.Connect(one(Msg(heartbeat=Msg.Heartbeat())))
    error = await rpc_error(call.read())
    assert error.code() == Code.INVALID_ARGUMENT and "Register" in error.details()
    await channel.close()


async def test_bad_operator_calls(cluster):
    master, agent, framework, offer = cluster
    channel, ops = operator(master.address)
    async with channel:
        error = await rpc_error(
            ops.UpdateWeight(operator_pb2.UpdateWeightRequest(role="a", weight=-1))
        )
        assert error.code() == Code.INVALID_ARGUMENT
        error = await rpc_error(
            ops.ExplainOffers(operator_pb2.ExplainOffersRequest(framework="nobody"))
        )
        assert error.code() == Code.NOT_FOUND
        error = await rpc_error(ops.DrainAgent(operator_pb2.DrainAgentRequest(agent_id="x")))
        assert error.code() == Code.NOT_FOUND
        error = await rpc_error(
            ops.SetQuota(
                operator_pb2.SetQuotaRequest(
                    role="a", quota=operator_pb2.Quota(guarantee=[res("cpus", math.nan)])
                )
            )
        )
        assert error.code() == Code.INVALID_ARGUMENT


async def test_master_keeps_serving_after_bad_input(cluster):
    master, agent, framework, offer = cluster
    for _ in range(3):
        await rpc_error(framework.accept(["offer-nope"], [task("t")]))
        await rpc_error(framework.accept([offer.offer_id], [task("t", "cpus:99")]))
    channel = insecure_channel(master.address)
    async with channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="agora.v1.Scheduler")
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    await framework.accept([offer.offer_id], [task("t")])
    await agent.inbox.expect("run_task")


async def test_bad_status_update_is_acknowledged_and_dropped_without_breaking_the_agent(cluster):
    master, agent, framework, offer = cluster
    await framework.accept([offer.offer_id], [task("t")])
    await agent.inbox.expect("run_task")
    for state in (999, common_pb2.TASK_STATE_UNSPECIFIED):
        uuid = agent.status(framework.framework_id, "t", state)
        # Acknowledged, so the agent stops resending it; the stream stays up.
        await agent.inbox.expect("status_update_ack", lambda a, u=uuid: a.uuid == u)
    uuid = agent.status(framework.framework_id, "", common_pb2.TASK_RUNNING)
    await agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid)
    assert not agent.inbox.closed
    agent.status(framework.framework_id, "t", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update")
    # Only the good update reached the framework.
    assert [(u.status.task_id, u.status.state) for u in framework.inbox.of("update")] == [
        ("t", common_pb2.TASK_RUNNING)
    ]


async def test_a_reported_task_in_an_unknown_state_is_adopted_in_a_state_operators_can_read(
    cluster,
):
    master, agent, framework, offer = cluster
    other = FakeAgent(master.address, hostname="odd")
    running = agent_link_pb2.RunningTask(
        framework_id=framework.framework_id, task=task("odd-task"), state=999
    )
    try:
        await other.connect(tasks=[running])
        channel, ops = operator(master.address)
        async with channel:
            tasks = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
        [odd] = [t for t in tasks if t.task_id == "odd-task"]
        # `agora cluster tasks` names every state: an unknown number would break it.
        assert common_pb2.TaskState.Name(odd.state) == "TASK_STAGING"
    finally:
        await other.close()


async def test_absurdly_large_amounts_are_invalid_not_an_internal_error(cluster):
    master, agent, framework, offer = cluster
    channel, ops = operator(master.address)
    async with channel:
        error = await rpc_error(
            ops.SetQuota(
                operator_pb2.SetQuotaRequest(
                    role="a", quota=operator_pb2.Quota(guarantee=[res("cpus", 1e308)])
                )
            )
        )
        assert error.code() == Code.INVALID_ARGUMENT and "at most" in error.details()
    from agora.v1 import agent_link_pb2_grpc

    Msg = agent_link_pb2.AgentMessage

    async def register():
        yield Msg(
            register=Msg.Register(
                info=common_pb2.AgentInfo(hostname="huge", resources=[res("cpus", 1e308)])
            )
        )

    async with insecure_channel(master.address) as channel:
        call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect(register())
        error = await rpc_error(call.read())
        assert error.code() == Code.INVALID_ARGUMENT and "at most" in error.details()
    error = await rpc_error(
        framework.accept([offer.offer_id], [raw_task("big", [res("mem", 1e308)])])
    )
    assert error.code() == Code.INVALID_ARGUMENT


BAD_ACKS = {
    "short uuid": (dict(uuid=b"\x01" * 3), Code.INVALID_ARGUMENT, "16 bytes"),
    "unknown agent": (dict(agent_id="agent-nobody"), Code.NOT_FOUND, "agent-nobody"),
}


@pytest.mark.parametrize("case", sorted(BAD_ACKS))
async def test_one_bad_acknowledgement_in_a_batch_refuses_the_call_and_applies_none(cluster, case):
    master, agent, framework, offer = cluster
    await framework.accept([offer.offer_id], [task("a"), task("b")], refuse_seconds=0)
    fid = framework.framework_id
    uuid_a = agent.status(fid, "a", common_pb2.TASK_FINISHED)
    uuid_b = agent.status(fid, "b", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update", lambda u: u.status.task_id == "b")
    Ack = scheduler_pb2.Acknowledgement
    good_b = Ack(agent_id=agent.agent_id, task_id="b", uuid=uuid_b)
    fields, code, words = BAD_ACKS[case]
    bad = Ack(**{**dict(agent_id=agent.agent_id, task_id="x", uuid=b"\x02" * 16), **fields})
    ack_a = dict(agent_id=agent.agent_id, task_id="a", uuid=uuid_a)

    error = await rpc_error(
        framework.stub.Acknowledge(
            scheduler_pb2.AcknowledgeRequest(
                **framework.ids(), **ack_a, acknowledgements=[good_b, bad]
            )
        )
    )
    assert error.code() == code
    # It names the entry (its index in the list and its task) and says what to do.
    assert "acknowledgements[1] (task 'x')" in error.details() and words in error.details()
    assert "none of the call's 3 acknowledgements was applied" in error.details()

    # Nothing applied. The final update of "a" still holds its task id...
    rest = (await framework.offers())[0]
    refused = await rpc_error(framework.accept([rest.offer_id], [task("a")]))
    assert "not acknowledged" in refused.details()
    # ...and no ack reached the agent: acks go down one ordered stream, so any from the refused
    # call would have arrived before this later one.
    marker = agent.status(fid, "b", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update", lambda u: u.status.uuid == marker)
    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(
            **framework.ids(), agent_id=agent.agent_id, task_id="b", uuid=marker
        )
    )
    await agent.inbox.expect("status_update_ack", lambda a: a.uuid == marker)
    assert [a.uuid for a in agent.inbox.of("status_update_ack")] == [marker]

    # Fixed (the bad entry dropped) and sent again: all applied.
    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(**framework.ids(), **ack_a, acknowledgements=[good_b])
    )
    await agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid_a)
    await agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid_b)
    await framework.accept([rest.offer_id], [task("a")])


async def test_an_acknowledgement_with_nothing_to_acknowledge_is_invalid(cluster):
    master, agent, framework, offer = cluster
    error = await rpc_error(
        framework.stub.Acknowledge(scheduler_pb2.AcknowledgeRequest(**framework.ids()))
    )
    assert error.code() == Code.INVALID_ARGUMENT
    assert "set agent_id, task_id and uuid" in error.details()
    # Master-generated updates (no uuid) need no ack: acknowledging one is accepted and ignored.
    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(
            **framework.ids(),
            acknowledgements=[scheduler_pb2.Acknowledgement(agent_id="a", task_id="t-lost")],
        )
    )
    # A bad singular acknowledgement is named as such.
    error = await rpc_error(
        framework.stub.Acknowledge(
            scheduler_pb2.AcknowledgeRequest(
                **framework.ids(), agent_id=agent.agent_id, task_id="t", uuid=b"\x01"
            )
        )
    )
    assert error.code() == Code.INVALID_ARGUMENT
    assert "agent_id/task_id/uuid (task 't')" in error.details() and "16 bytes" in error.details()


async def test_an_update_for_a_task_no_framework_launched_is_acknowledged_and_dropped(cluster):
    """An agent (confused, or holding a stolen certificate) reports a task nobody launched on
    it: the framework never hears of it, the agent is acknowledged, the master counts it."""
    master, agent, framework, offer = cluster
    uuid = agent.status(framework.framework_id, "made-up", common_pb2.TASK_FINISHED)
    await agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid)
    await framework.accept([offer.offer_id], [task("t")])
    await agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "t", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update")
    assert [u.status.task_id for u in framework.inbox.of("update")] == ["t"]
    assert master.core.counts.updates_for_unknown_tasks == 1
    channel, ops = operator(master.address)
    async with channel:
        tasks = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
    assert "made-up" not in {t.task_id for t in tasks}


async def test_a_time_limit_that_is_not_a_duration_is_refused(cluster):
    master, agent, framework, offer = cluster
    for bad in (-1.0, float("nan"), 10 * 365 * 24 * 3600.0):
        error = await rpc_error(
            framework.accept([offer.offer_id], [task("t", max_completion_seconds=bad)])
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_completion_seconds must be 0 (no limit) to" in error.details()
