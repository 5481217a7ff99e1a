"""Hostile-but-well-formed input through the real master: past a documented limit a call gets
INVALID_ARGUMENT naming the field, the size and the limit, and the master keeps serving."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest

from agora.frameworks.sdk import SchedulerError, framework_info
from agora.frameworks.sdk.transport import GrpcSchedulerTransport
from agora.master import Master, MasterConfig, limits
from agora.v1 import agent_link_pb2, agent_link_pb2_grpc, common_pb2, scheduler_pb2


@pytest.fixture
async def master():
    m = Master(MasterConfig(port=0))
    await m.start()
    yield m
    await m.stop(0)


async def subscribe(transport, **info_fields):
    info = framework_info("limits")
    for key, value in info_fields.items():
        setattr(info, key, value)
    stream = transport.subscribe(scheduler_pb2.SubscribeRequest(framework=info))
    async for event in stream:
        return event.subscribed, stream


async def refused(transport, method: str, request) -> str:
    with pytest.raises(SchedulerError) as e:
        await transport.call(method, request)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert len(e.value.message) < 300  # the value is never echoed in full
    return e.value.message


def launch(tasks) -> list[scheduler_pb2.Operation]:
    return [scheduler_pb2.Operation(launch=scheduler_pb2.Operation.Launch(task_infos=tasks))]


def task(task_id: str, cpus: float = 0.1, **command) -> common_pb2.TaskInfo:
    return common_pb2.TaskInfo(
        task_id=task_id,
        resources=[
            common_pb2.Resource(name="cpus", type=common_pb2.Resource.SCALAR, scalar=cpus),
            common_pb2.Resource(name="mem", type=common_pb2.Resource.SCALAR, scalar=32),
        ],
        command=common_pb2.CommandInfo(**(command or {"shell": "true"})),
    )


async def test_oversized_calls_are_refused_naming_the_limit(master):
    transport = GrpcSchedulerTransport(master.address)
    # A 1 MB framework name: refused before it is stored or logged.
    stream = transport.subscribe(
        scheduler_pb2.SubscribeRequest(framework=framework_info("x" * 1_000_000))
    )
    with pytest.raises(SchedulerError) as e:
        async for _ in stream:
            pass
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "name: 1000000 characters" in e.value.message and "limit is 256" in e.value.message
    # A 10 MB one is refused at the door, for its size, before it is even parsed.
    huge = scheduler_pb2.SubscribeRequest(framework=framework_info("x" * 10_000_000))
    stream = transport.subscribe(huge)
    with pytest.raises(SchedulerError) as e:
        async for _ in stream:
            pass
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Its size: the name, and a few bytes more (the host's name, which framework_info adds).
    assert re.search(r"Subscribe: a request of 100000\d\d bytes; this call takes at most \d+",
                     e.value.message), e.value.message  # fmt: skip
    assert master.core.reg.frameworks == {}

    subscribed, stream = await subscribe(transport)
    ids = {"framework_id": subscribed.framework_id, "stream_id": subscribed.stream_id}
    many = [task(f"t{i}") for i in range(limits.MAX_TASKS_PER_ACCEPT + 1)]
    message = await refused(
        transport,
        "Accept",
        scheduler_pb2.AcceptRequest(**ids, offer_ids=["o"], operations=launch(many)),
    )
    assert "tasks: 1001 entries; the limit is 1000 per call" in message
    message = await refused(
        transport,
        "Accept",
        scheduler_pb2.AcceptRequest(**ids, offer_ids=["o"], operations=launch([task("t", 0.0001)])),
    )
    assert "asks for cpus 0.0001; the smallest a task may ask for is 0.001" in message
    huge_env = task("e", environment={"K": "v" * (limits.MAX_ENVIRONMENT_BYTES + 1)}, shell="true")
    request = scheduler_pb2.AcceptRequest(
        **ids, offer_ids=["o"], operations=launch([task("fine"), huge_env])
    )
    with pytest.raises(SchedulerError) as e:
        await transport.call("Accept", request)
    assert "command.environment: 65538 bytes; the limit is 65536" in e.value.message
    # The refusal names the task in its ErrorInfo, for frameworks to act on (not the wording).
    assert e.value.metadata.get("task_id") == "e"
    wanted = [
        scheduler_pb2.ReconcileRequest.Task(task_id=f"t{i}")
        for i in range(limits.MAX_RECONCILE_TASKS + 1)
    ]
    message = await refused(
        transport, "Reconcile", scheduler_pb2.ReconcileRequest(**ids, tasks=wanted)
    )
    assert "tasks: 10001 entries; the limit is 10000" in message
    # And the master still serves this framework as before.
    await transport.call("Revive", scheduler_pb2.ReviveRequest(**ids))
    stream.cancel()
    await transport.close()


async def test_an_agent_listing_too_many_tasks_is_refused(master):
    running = [
        agent_link_pb2.RunningTask(
            framework_id="f", task=task(f"t{i}"), state=common_pb2.TASK_RUNNING
        )
        for i in range(limits.MAX_AGENT_TASKS + 1)
    ]
    register = agent_link_pb2.AgentMessage.Register(
        info=common_pb2.AgentInfo(hostname="h"), tasks=running
    )
    async with grpc.aio.insecure_channel(
        master.address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect(
            iter([agent_link_pb2.AgentMessage(register=register)])
        )
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call.read()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tasks: 10001 entries; the limit is 10000" in e.value.details()
    assert master.core.reg.frameworks == {}  # no placeholder frameworks were made


async def test_kill_grace_periods_past_the_masters_maximum_are_refused(master):
    transport = GrpcSchedulerTransport(master.address)
    subscribed, stream = await subscribe(transport)
    ids = {"framework_id": subscribed.framework_id, "stream_id": subscribed.stream_id}
    stubborn = task("stubborn")
    stubborn.kill_grace_period_seconds = 1e308
    message = await refused(
        transport,
        "Accept",
        scheduler_pb2.AcceptRequest(**ids, offer_ids=["o"], operations=launch([stubborn])),
    )
    assert "kill_grace_period_seconds: 1e+308 s; the longest allowed is 300 s" in message
    message = await refused(
        transport,
        "Kill",
        scheduler_pb2.KillRequest(**ids, task_id="t", grace_period_seconds=1e9),
    )
    assert "grace_period_seconds: 1e+09 s; the longest allowed is 300 s" in message
    # Offers come back by default: a framework that never answers cannot hold them for ever.
    assert master.config.offer_timeout_seconds == 60.0
    stream.cancel()
    await transport.close()


async def test_a_framework_that_stops_reading_is_cut_off_and_can_fail_over():
    """Its queue is bounded: past max_send_queue waiting events the stream is cut and dropped
    (the master's memory does not grow with a slow reader); it re-subscribes as after any
    disconnection."""
    import asyncio

    from agora.common.rpc import open_channel
    from agora.v1 import scheduler_pb2_grpc

    master = Master(MasterConfig(port=0, max_send_queue=50))
    await master.start()
    channel = open_channel(master.address)
    try:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        info = framework_info("slow", failover_timeout=60)
        call = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        subscribed = await call.read()  # then it never reads again
        framework_id = subscribed.subscribed.framework_id
        core = master.core
        framework = core.reg.frameworks[framework_id]
        big = "x" * 60_000  # gRPC's flow control holds the writer after a few of these
        for i in range(400):
            if not framework.connected:
                break
            core.frameworks.send_update(
                framework_id,
                common_pb2.TaskStatus(task_id=f"t{i}", state=common_pb2.TASK_RUNNING, message=big),
            )
            await asyncio.sleep(0.005)
        for _ in range(200):
            if not framework.connected:
                break
            await asyncio.sleep(0.05)
        assert not framework.connected, "the master kept a framework that stopped reading"
        assert framework_id in core.reg.frameworks  # kept for its failover timeout
        call.cancel()
        # It comes back (reading this time) with the same id.
        info.framework_id = framework_id
        again = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        event = await again.read()
        assert event.subscribed.framework_id == framework_id
        assert core.reg.frameworks[framework_id].connected
        again.cancel()
    finally:
        await channel.close()
        await master.stop()


def test_a_reader_that_never_reads_cannot_grow_the_masters_memory(tmp_path):
    """The probe that took a master from 56 MB to 1.75 GB: Reconcile floods on a Subscribe
    stream that is never read. Now the stream is cut past --max-send-queue, and the master's
    RSS (read from /proc) stays within a bound."""
    import time

    from harness import Daemon

    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.v1 import operator_pb2, operator_pb2_grpc, scheduler_pb2_grpc

    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m"), "--max-send-queue", "20000"],
        tmp_path / "master.log",
    ).start()

    def rss_mb() -> float:
        status = Path(f"/proc/{master.proc.pid}/status").read_text()
        line = next(row for row in status.splitlines() if row.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    try:
        channel = grpc.insecure_channel(master.address, options=CHANNEL_OPTIONS)
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        stream = stub.Subscribe(
            scheduler_pb2.SubscribeRequest(framework=framework_info("hog", failover_timeout=60))
        )
        subscribed = next(stream).subscribed  # and never read again
        ids = dict(framework_id=subscribed.framework_id, stream_id=subscribed.stream_id)
        before = peak = rss_mb()
        tasks = [scheduler_pb2.ReconcileRequest.Task(task_id=f"ghost-{i}") for i in range(10_000)]
        cut = False
        for _ in range(60):  # up to 600,000 answers for a reader that reads none
            try:
                stub.Reconcile(scheduler_pb2.ReconcileRequest(**ids, tasks=tasks), timeout=30)
            except grpc.RpcError as e:  # cut off: its stream is no longer current
                cut = e.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND)
                break
            peak = max(peak, rss_mb())
        time.sleep(0.5)
        peak = max(peak, rss_mb())
        ops = operator_pb2_grpc.OperatorStub(channel)
        frameworks = ops.ListFrameworks(operator_pb2.ListFrameworksRequest(), timeout=10)
        [hog] = [f for f in frameworks.frameworks if f.info.framework_id == ids["framework_id"]]
        assert cut or not hog.connected, "the master kept queueing for a reader that never reads"
        print(f"master RSS {before:.0f} MB before, {peak:.0f} MB at most")
        assert peak - before < 200, f"master RSS grew from {before:.0f} to {peak:.0f} MB"
        stream.cancel()
        channel.close()
    finally:
        master.stop()
