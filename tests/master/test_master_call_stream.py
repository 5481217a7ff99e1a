"""Scheduler.Calls over real gRPC: a framework's calls carried on one stream are answered in
order, each exactly as its unary call would be (the same effect, status, reason and limits),
and the SDK's transport uses it (master/call_stream.py, frameworks/sdk/call_stream.py)."""

from __future__ import annotations

import grpc
import pytest
from harness import eventually_async
from master_harness import FakeAgent, FakeFramework, start_master, task

from agora.common.errors import Reason, details_info
from agora.frameworks.sdk import GrpcSchedulerTransport, SchedulerError
from agora.master.call_stream import MAX_CALLS_PER_BATCH
from agora.v1 import common_pb2, scheduler_pb2

Call = scheduler_pb2.Call


@pytest.fixture
async def cluster():
    master = await start_master(None, heartbeat_interval_seconds=1.0, agent_timeout_seconds=30.0)
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    yield master, agent, framework
    await framework.close()
    await agent.close()
    await master.stop(0)


async def _exchange(framework: FakeFramework, *batches: list[Call]) -> list:
    """Sends each batch on one Calls stream and returns every result, in order."""
    call = framework.stub.Calls()
    results = []
    for calls in batches:
        await call.write(scheduler_pb2.CallBatch(calls=calls))
        results.extend((await call.read()).results)
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    return results


def _handled(master, method: str, code: str) -> float:
    value = master.metrics.registry.get_sample_value(
        "agora_grpc_server_handled_total",
        {"grpc_service": "agora.v1.Scheduler", "grpc_method": method, "grpc_code": code},
    )
    return value or 0.0


async def test_calls_on_the_stream_launch_and_acknowledge_as_unary_calls_do(cluster):
    master, agent, framework = cluster
    [offer] = await framework.offers()
    accept = scheduler_pb2.AcceptRequest(
        **framework.ids(),
        offer_ids=[offer.offer_id],
        operations=[
            scheduler_pb2.Operation(
                launch=scheduler_pb2.Operation.Launch(task_infos=[task("t1", "cpus:1;mem:64")])
            )
        ],
    )
    [result] = await _exchange(framework, [Call(id=7, accept=accept)])
    assert (result.id, result.code) == (7, 0)
    run = await agent.inbox.expect("run_task")
    assert run.task.task_id == "t1"

    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
    ack = scheduler_pb2.AcknowledgeRequest(
        **framework.ids(), agent_id=agent.agent_id, task_id="t1", uuid=uuid
    )
    revive = scheduler_pb2.ReviveRequest(**framework.ids())
    results = await _exchange(framework, [Call(id=8, acknowledge=ack), Call(id=9, revive=revive)])
    assert [(r.id, r.code) for r in results] == [(8, 0), (9, 0)]
    got = await agent.inbox.expect("status_update_ack")
    assert (got.task_id, got.uuid) == ("t1", uuid)
    # Counted as the unary calls are, under their own names.
    assert _handled(master, "Accept", "OK") == 1
    assert _handled(master, "Acknowledge", "OK") == 1


async def test_a_refused_call_gets_its_own_status_and_the_others_in_its_batch_go_on(cluster):
    master, _agent, framework = cluster
    stale = scheduler_pb2.ReviveRequest(framework_id=framework.framework_id, stream_id="old")
    good = scheduler_pb2.SuppressRequest(**framework.ids())
    too_long = scheduler_pb2.ReviveRequest(framework_id="f" * 10_000, stream_id="s")
    results = await _exchange(
        framework,
        [Call(id=1, revive=stale), Call(id=2, suppress=good), Call(id=3, revive=too_long)],
        [Call(id=4)],  # names no call
    )
    assert [r.id for r in results] == [1, 2, 3, 4]
    refused, ok, long_id, empty = results
    assert grpc.StatusCode.PERMISSION_DENIED.value[0] == refused.code
    assert "not the current subscription" in refused.message
    assert details_info(refused.status_details)[0] == Reason.STREAM_STALE
    assert ok.code == 0
    assert master.core.reg.frameworks[framework.framework_id].suppressed
    assert long_id.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "framework_id" in long_id.message and len(long_id.message) < 500
    # A call this master does not know (from a caller of a later version, say): that caller
    # then makes it as a unary call.
    assert empty.code == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert "accept" in empty.message  # says what a call may be
    assert _handled(master, "Revive", "PERMISSION_DENIED") == 1


async def test_a_batch_over_the_limit_ends_the_stream_with_a_clear_error(cluster):
    _master, _agent, framework = cluster
    revive = scheduler_pb2.ReviveRequest(**framework.ids())
    call = framework.stub.Calls()
    calls = [Call(id=i, revive=revive) for i in range(MAX_CALLS_PER_BATCH + 1)]
    await call.write(scheduler_pb2.CallBatch(calls=calls))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_CALLS_PER_BATCH}" in refused.value.details()


async def test_the_sdk_transport_makes_its_calls_on_one_stream(cluster):
    master, _agent, framework = cluster
    transport = GrpcSchedulerTransport(master.address)
    await transport.start()
    revive = scheduler_pb2.ReviveRequest(**framework.ids())
    for _ in range(5):
        await transport.call("Revive", revive)
    with pytest.raises(SchedulerError) as refused:
        await transport.call(
            "Revive", scheduler_pb2.ReviveRequest(framework_id=framework.framework_id)
        )
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.reason == Reason.STREAM_STALE
    await transport.close()
    assert _handled(master, "Revive", "OK") == 5
    # One stream carried them (counted when it ended), not six unary calls.
    await eventually_async(
        lambda: sum(_handled(master, "Calls", code) for code in ("OK", "CANCELLED")) == 1
    )


async def test_a_call_on_a_stream_that_breaks_fails_as_a_transient_error():
    master = await start_master(None)
    framework = FakeFramework(master.address)
    await framework.subscribe()
    transport = GrpcSchedulerTransport(master.address, call_timeout=5.0)
    await transport.start()
    revive = scheduler_pb2.ReviveRequest(**framework.ids())
    try:
        await transport.call("Revive", revive)
        await master.stop(0)
        with pytest.raises(SchedulerError) as failed:
            await transport.call("Revive", revive)
        # The stream's own error, at once: not a wait for the call's timeout.
        assert failed.value.transient, failed.value
        assert failed.value.code != grpc.StatusCode.DEADLINE_EXCEEDED, failed.value
    finally:
        await transport.close()
        await framework.close()
