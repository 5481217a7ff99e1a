"""The real driver over real gRPC on loopback, against a scripted Scheduler servicer.

FakeMaster below is a real grpc.aio server that plays the master's side of the Scheduler
contract (notes/contracts.md) closely enough to drive the SDK: it checks framework and stream
ids on every call, fails over old streams, offers its agents, and can "run" launched tasks by
sending their updates with uuids. One test (acknowledgements in bursts) runs the real master
with a raw-gRPC agent instead; end-to-end tests with real processes live elsewhere.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from harness import eventually_async
from master_harness import FakeAgent, start_master

from agora.common import Resources, new_id, new_uuid
from agora.common.errors import Reason, rich_status
from agora.frameworks.sdk import (
    Backoff,
    Driver,
    Framework,
    SchedulerError,
    SubscriptionEnded,
    TaskSpec,
    fit,
    run_async,
)
from agora.frameworks.sdk.driver import framework_info
from agora.frameworks.sdk.transport import GrpcSchedulerTransport
from agora.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 20.0
Event = scheduler_pb2.Event


class FakeMaster(scheduler_pb2_grpc.SchedulerServicer):
    """A Scheduler service of unary calls only: it does not implement Calls, as a master of an
    earlier version, so every test here also shows the SDK falling back to unary calls."""

    def __init__(
        self,
        agents: dict[str, str] | None = None,
        heartbeat: float = 15.0,
        outcome: Callable[[common_pb2.TaskInfo], int] | None = None,
    ) -> None:
        self.agents = agents or {}
        self.heartbeat = heartbeat
        # task -> its final state, or None to leave it "running" (no updates).
        self.outcome = outcome
        self.subscriptions: asyncio.Queue = asyncio.Queue()  # (request, framework_id, stream)
        self.calls: asyncio.Queue = asyncio.Queue()  # (method, request)
        self.log: list[tuple[str, object]] = []
        self.current: dict[str, str] = {}  # framework_id -> stream_id
        self.queues: dict[str, asyncio.Queue] = {}  # stream_id -> events
        self.offers: dict[str, str] = {}  # offer_id -> agent_id
        self.acked: set[tuple[str, bytes]] = set()
        self.sent_uuids: set[tuple[str, bytes]] = set()
        self.refuse_subscribe: tuple[grpc.StatusCode, str] | None = None

    # --- the test's side -----------------------------------------------------------------

    def send(self, framework_id: str, *events: Event) -> None:
        queue = self.queues[self.current[framework_id]]
        for event in events:
            queue.put_nowait(event)

    def forget_stream(self, framework_id: str) -> None:
        """As if another scheduler had failed over: calls on the old stream become stale."""
        self.current[framework_id] = "someone-else"

    async def next_subscription(self):
        return await asyncio.wait_for(self.subscriptions.get(), TIMEOUT)

    async def next_call(self, method: str):
        async with asyncio.timeout(TIMEOUT):
            while True:
                name, request = await self.calls.get()
                if name == method:
                    return request

    def offer_event(self, framework_id: str, agent_ids) -> Event:
        offers = []
        for agent_id in agent_ids:
            offer_id = new_id("offer")
            self.offers[offer_id] = agent_id
            offers.append(
                common_pb2.Offer(
                    offer_id=offer_id,
                    framework_id=framework_id,
                    agent_id=agent_id,
                    hostname=agent_id,
                    resources=Resources.parse(self.agents[agent_id]).to_proto(),
                )
            )
        return Event(offers=Event.Offers(offers=offers))

    # --- the Scheduler service ------------------------------------------------------------

    async def Subscribe(self, request, context):
        if self.refuse_subscribe:
            await context.abort(*self.refuse_subscribe)
        framework_id = request.framework.framework_id or new_id("fw")
        old = self.current.get(framework_id)
        if old in self.queues:
            self.queues[old].put_nowait(Event(error=Event.Error(message="framework failed over")))
            self.queues[old].put_nowait(None)
        stream_id = new_id("stream")
        queue = self.queues[stream_id] = asyncio.Queue()
        self.current[framework_id] = stream_id
        self.subscriptions.put_nowait((request, framework_id, stream_id))
        yield Event(
            subscribed=Event.Subscribed(
                framework_id=framework_id,
                stream_id=stream_id,
                heartbeat_interval_seconds=self.heartbeat,
                master_id="fake-master",
            )
        )
        if self.agents:
            yield self.offer_event(framework_id, self.agents)
        while (event := await queue.get()) is not None:
            yield event

    async def _check(self, method, request, context):
        self.log.append((method, request))
        self.calls.put_nowait((method, request))
        if request.framework_id not in self.current:
            # With the reason the real master gives (the SDK acts on the reason, not the text).
            await context.abort_with_status(
                rich_status(
                    grpc.StatusCode.NOT_FOUND,
                    f"framework {request.framework_id!r} is not subscribed",
                    Reason.FRAMEWORK_UNKNOWN,
                )
            )
        if self.current[request.framework_id] != request.stream_id:
            await context.abort_with_status(
                rich_status(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"stream {request.stream_id!r} is not the current subscription "
                    f"of framework {request.framework_id}",
                    Reason.STREAM_STALE,
                )
            )

    async def Accept(self, request, context):
        await self._check("Accept", request, context)
        agents = {self.offers.pop(offer_id, None) for offer_id in request.offer_ids}
        if None in agents:
            await context.abort(grpc.StatusCode.NOT_FOUND, "offer is unknown")
        for operation in request.operations:
            for task in operation.launch.task_infos:
                self._run(request.framework_id, task)
        # The unused part comes back at once (the framework passed refuse_seconds=0).
        self.send(request.framework_id, self.offer_event(request.framework_id, agents))
        return scheduler_pb2.AcceptResponse()

    def _run(self, framework_id: str, task: common_pb2.TaskInfo) -> None:
        final = self.outcome(task) if self.outcome else None
        if final is None:
            return
        for state in (common_pb2.TASK_STARTING, common_pb2.TASK_RUNNING, final):
            uuid = new_uuid()
            self.sent_uuids.add((task.task_id, uuid))
            status = common_pb2.TaskStatus(
                task_id=task.task_id,
                state=state,
                agent_id=task.agent_id,
                uuid=uuid,
                framework_id=framework_id,
                source=common_pb2.TaskStatus.SOURCE_AGENT,
                message="exited with code 0" if state == common_pb2.TASK_FINISHED else "",
            )
            self.send(framework_id, Event(update=Event.Update(status=status)))

    async def Decline(self, request, context):
        await self._check("Decline", request, context)
        for offer_id in request.offer_ids:
            self.offers.pop(offer_id, None)
        return scheduler_pb2.DeclineResponse()

    async def Revive(self, request, context):
        await self._check("Revive", request, context)
        return scheduler_pb2.ReviveResponse()

    async def Suppress(self, request, context):
        await self._check("Suppress", request, context)
        return scheduler_pb2.SuppressResponse()

    async def Kill(self, request, context):
        await self._check("Kill", request, context)
        return scheduler_pb2.KillResponse()

    async def Acknowledge(self, request, context):
        await self._check("Acknowledge", request, context)
        # The singular fields and the list are all applied (see scheduler.proto).
        self.acked.add((request.task_id, request.uuid))
        self.acked.update((a.task_id, a.uuid) for a in request.acknowledgements)
        return scheduler_pb2.AcknowledgeResponse()

    async def Reconcile(self, request, context):
        await self._check("Reconcile", request, context)
        return scheduler_pb2.ReconcileResponse()

    async def Teardown(self, request, context):
        await self._check("Teardown", request, context)
        self.send(request.framework_id, Event(error=Event.Error(message="framework removed")), None)
        del self.current[request.framework_id]
        return scheduler_pb2.TeardownResponse()


async def serve(fake: FakeMaster, port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    scheduler_pb2_grpc.add_SchedulerServicer_to_server(fake, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


@pytest.fixture
async def master():
    fake = FakeMaster()
    server, port = await serve(fake)
    fake.address = f"127.0.0.1:{port}"
    fake.port = port
    fake.server = server
    yield fake
    await fake.server.stop(0)


class Recorder(Framework):
    def __init__(self):
        self.events: asyncio.Queue = asyncio.Queue()

    async def next(self, name):
        async with asyncio.timeout(TIMEOUT):
            while True:
                callback, args = await self.events.get()
                if callback == name:
                    return args

    async def on_subscribed(self, driver, framework_id):
        self.driver = driver
        self.events.put_nowait(("on_subscribed", framework_id))

    async def on_offers(self, driver, offers):
        self.events.put_nowait(("on_offers", offers))

    async def on_update(self, driver, status):
        self.events.put_nowait(("on_update", status))

    async def on_disconnected(self, driver):
        self.events.put_nowait(("on_disconnected", None))

    async def on_error(self, driver, message):
        self.events.put_nowait(("on_error", message))


def fast_driver(framework, address, **info) -> Driver:
    return Driver(
        framework,
        GrpcSchedulerTransport(address),
        framework_info("t", **info),
        backoff=Backoff(initial=0.05, cap=0.2),
        min_silence=0.05,
    )


async def test_launch_and_acknowledge_over_grpc(master):
    master.agents = {"agent-1": "cpus:1;mem:256;ports:[31000-31001]"}
    master.outcome = lambda task: common_pb2.TASK_FINISHED

    class OneTask(Framework):
        async def on_offers(self, driver, offers):
            self.launched = getattr(self, "launched", False)
            if self.launched:
                await driver.decline(offers)
                return
            result = fit(offers, [TaskSpec("one", cpus=0.5, mem=64, ports=1, command="true")])
            await driver.launch(result.placements[0].offers, result.placements[0].tasks)
            self.launched = True

        async def on_update(self, driver, status):
            if status.state == common_pb2.TASK_FINISHED:
                driver.stop()

    await asyncio.wait_for(run_async(OneTask(), master.address, name="one"), TIMEOUT)
    request, _, _ = master.subscriptions.get_nowait()
    assert request.framework.name == "one" and request.framework.failover_timeout_seconds > 0
    accept = next(r for m, r in master.log if m == "Accept")
    (task,) = accept.operations[0].launch.task_infos
    assert Resources.from_proto(task.resources) == Resources.parse(
        "cpus:0.5;mem:64;ports:[31000-31000]"
    )
    # Every reliable update was acknowledged with its own uuid, the last one before run returned.
    assert master.acked == master.sent_uuids and len(master.acked) == 3


async def test_reconnects_to_a_restarted_master_with_the_same_id_and_reconciles(master):
    fw = Recorder()
    driver = fast_driver(fw, master.address)
    run = asyncio.create_task(driver.run())
    _, framework_id, _ = await master.next_subscription()
    await fw.next("on_subscribed")

    # The master process goes away and a new one comes up on the same address.
    await master.server.stop(0)
    restarted = FakeMaster()
    master.server, _ = await serve(restarted, master.port)
    await fw.next("on_disconnected")
    request, resubscribed_id, stream_id = await restarted.next_subscription()
    assert request.framework.framework_id == framework_id == resubscribed_id
    assert await fw.next("on_subscribed") == framework_id
    reconcile = await restarted.next_call("Reconcile")
    assert (reconcile.framework_id, reconcile.stream_id, len(reconcile.tasks)) == (
        framework_id,
        stream_id,
        0,
    )
    driver.stop()
    await asyncio.wait_for(run, TIMEOUT)


async def test_a_silent_master_is_left_and_subscribed_again(master):
    master.heartbeat = 0.1  # and it never sends one
    fw = Recorder()
    driver = fast_driver(fw, master.address)
    run = asyncio.create_task(driver.run())
    _, framework_id, first_stream = await master.next_subscription()
    await fw.next("on_disconnected")
    request, _, second_stream = await master.next_subscription()
    assert request.framework.framework_id == framework_id and second_stream != first_stream
    await fw.next("on_subscribed")
    driver.stop()
    await asyncio.wait_for(run, TIMEOUT)


async def test_a_call_on_a_stale_stream_resubscribes(master):
    fw = Recorder()
    driver = fast_driver(fw, master.address)
    run = asyncio.create_task(driver.run())
    _, framework_id, _ = await master.next_subscription()
    await fw.next("on_subscribed")
    master.forget_stream(framework_id)
    with pytest.raises(SchedulerError) as caught:
        await driver.revive()
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
    request, _, _ = await master.next_subscription()
    assert request.framework.framework_id == framework_id
    await master.next_call("Reconcile")
    driver.stop()
    await asyncio.wait_for(run, TIMEOUT)


async def test_a_refused_subscription_raises_from_run(master):
    master.refuse_subscribe = (
        grpc.StatusCode.FAILED_PRECONDITION,
        "framework fw-old was torn down; subscribe afresh",
    )
    fw = Recorder()
    with pytest.raises(SubscriptionEnded, match="torn down"):
        await asyncio.wait_for(run_async(fw, master.address, framework_id="fw-old"), TIMEOUT)
    assert "torn down" in await fw.next("on_error")


async def test_failing_over_to_a_second_scheduler_ends_the_first(master):
    first, second = Recorder(), Recorder()
    run_first = asyncio.create_task(run_async(first, master.address, name="a"))
    framework_id = await first.next("on_subscribed")
    run_second = asyncio.create_task(
        run_async(second, master.address, name="a", framework_id=framework_id)
    )
    assert await second.next("on_subscribed") == framework_id
    assert await first.next("on_error") == "framework failed over"
    with pytest.raises(SubscriptionEnded):
        await asyncio.wait_for(run_first, TIMEOUT)
    second.driver.stop()
    await asyncio.wait_for(run_second, TIMEOUT)


class CountingTransport(GrpcSchedulerTransport):
    """The real transport, keeping every Acknowledge request it sends."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.acks: list[scheduler_pb2.AcknowledgeRequest] = []

    async def call(self, method, request):
        if method == "Acknowledge":
            self.acks.append(request)
        return await super().call(method, request)


async def test_a_burst_of_updates_reaches_the_agent_as_acks_in_fewer_calls(tmp_path):
    master = await start_master(tmp_path / "state")
    agent = FakeAgent(master.address, resources="cpus:32;mem:4096")
    await agent.connect()
    tasks = 20

    class Launcher(Framework):
        launched = False

        async def on_offers(self, driver, offers):
            if self.launched:
                await driver.decline(offers)
                return
            specs = [TaskSpec(f"t{i}", cpus=1, mem=32, command="true") for i in range(tasks)]
            (placement,) = fit(offers, specs).placements
            await driver.launch(placement.offers, placement.tasks)
            self.launched = True

    transport = CountingTransport(master.address)
    driver = Driver(Launcher(), transport, framework_info("bursty"))
    run = asyncio.create_task(driver.run())
    try:
        await eventually_async(lambda: len(agent.inbox.of("run_task")) == tasks, timeout=TIMEOUT)
        runs = agent.inbox.of("run_task")
        sent = set()
        # As a real agent does (one pending update per task at a time): every task's RUNNING
        # at once, then, once those are acknowledged, every task's FINISHED at once.
        for state in (common_pb2.TASK_RUNNING, common_pb2.TASK_FINISHED):
            batch = {
                (r.task.task_id, agent.status(r.framework_id, r.task.task_id, state)) for r in runs
            }
            sent |= batch
            for _, uuid in batch:
                await agent.inbox.expect("status_update_ack", lambda a, u=uuid: a.uuid == u)
        acks = {(a.task_id, a.uuid) for a in agent.inbox.of("status_update_ack")}
        assert acks == sent and len(agent.inbox.of("status_update_ack")) == 2 * tasks
        # The master applied every entry of every call; there were fewer calls than updates.
        assert sum(1 + len(r.acknowledgements) for r in transport.acks) == 2 * tasks
        assert len(transport.acks) < 2 * tasks
    finally:
        driver.stop()
        await asyncio.wait_for(run, TIMEOUT)
        await agent.close()
        await master.stop(0)


# --- examples/hello_framework.py as a real process --------------------------------------------


async def run_hello(address: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "hello_framework.py"),
        "--master",
        address,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"hello did not exit:\n{out.decode()}\n{err.decode()}") from None
    return proc.returncode, out.decode(), err.decode()


AGENTS = {f"agent-{i}": f"cpus:2;mem:2048;ports:[3{i}000-3{i}099]" for i in range(3)}


async def test_hello_framework_launches_spreads_and_exits_zero(master):
    master.agents = AGENTS
    master.outcome = lambda task: common_pb2.TASK_FINISHED
    code, out, err = await run_hello(master.address, "--tasks", "20")
    assert code == 0, out + err
    launched = [
        task
        for m, r in master.log
        if m == "Accept"
        for op in r.operations
        for task in op.launch.task_infos
    ]
    assert sorted(t.command.shell for t in launched) == sorted(
        f"echo hello from task {n}" for n in range(1, 21)
    )
    assert {t.agent_id for t in launched} == set(AGENTS), out + err  # spread over every agent
    assert out.count(" FINISHED on ") == 20
    assert "all 20 tasks finished" in out
    assert master.acked == master.sent_uuids
    methods = [m for m, _ in master.log]
    assert "Suppress" in methods and methods[-1] == "Teardown"


async def test_hello_framework_exits_non_zero_with_a_summary_when_a_task_fails(master):
    master.agents = AGENTS
    master.outcome = lambda task: (
        common_pb2.TASK_FAILED if task.command.shell.endswith(" 3") else common_pb2.TASK_FINISHED
    )
    code, out, err = await run_hello(master.address, "--tasks", "5")
    assert code == 1
    assert "1 of 5 tasks did not finish" in err and "FAILED" in err


async def test_hello_framework_help():
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "hello_framework.py"),
        "--help",
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    assert b"--master" in out and b"--tasks" in out
