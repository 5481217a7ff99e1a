"""Driver logic through the in-memory transport seam: the test plays the master."""

import asyncio
import random

import grpc
import pytest
from harness import eventually_async

from agora.common.errors import Reason
from agora.frameworks.sdk import (
    Backoff,
    Driver,
    Framework,
    SchedulerError,
    SubscriptionEnded,
    TaskSpec,
    fit,
    framework_info,
)
from agora.frameworks.sdk.acks import AckBatcher
from agora.frameworks.sdk.testing import (
    MemoryTransport,
    error_event,
    failure_event,
    heartbeat_event,
    make_offer,
    offers_event,
    rescind_event,
    subscribed,
    update_event,
)
from agora.v1 import common_pb2, scheduler_pb2

TIMEOUT = 10.0
UUID = b"\x01" * 16


class Recorder(Framework):
    """Records every callback in a queue; tests await them in order."""

    def __init__(self):
        self.events: asyncio.Queue = asyncio.Queue()

    async def next(self, name=None):
        async with asyncio.timeout(TIMEOUT):
            while True:
                callback, args = await self.events.get()
                if name is None or callback == name:
                    return args

    async def on_subscribed(self, driver, framework_id):
        self.events.put_nowait(("on_subscribed", framework_id))

    async def on_offers(self, driver, offers):
        self.events.put_nowait(("on_offers", offers))

    async def on_update(self, driver, status):
        self.events.put_nowait(("on_update", status))

    async def on_rescind(self, driver, offer_id):
        self.events.put_nowait(("on_rescind", offer_id))

    async def on_agent_lost(self, driver, agent_id):
        self.events.put_nowait(("on_agent_lost", agent_id))

    async def on_error(self, driver, message):
        self.events.put_nowait(("on_error", message))

    async def on_disconnected(self, driver):
        self.events.put_nowait(("on_disconnected", None))


def fast_backoff():
    return Backoff(initial=0.01, cap=0.05, rng=random.Random(1))


async def start(framework, **info):
    transport = MemoryTransport(timeout=TIMEOUT)
    driver = Driver(
        framework,
        transport,
        framework_info("test", **info),
        backoff=fast_backoff(),
        min_silence=0.01,
    )
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    return transport, driver, task, stream


async def finish(driver, task):
    driver.stop()
    await asyncio.wait_for(task, TIMEOUT)


async def test_subscribes_with_the_framework_info_and_reports_the_id():
    fw = Recorder()
    transport, driver, task, stream = await start(fw, role="analytics", failover_timeout=30)
    info = stream.request.framework
    assert (info.name, info.role, info.failover_timeout_seconds) == ("test", "analytics", 30)
    assert info.framework_id == ""
    stream.send(subscribed("fw-1", stream_id="s-1"))
    assert await fw.next("on_subscribed") == "fw-1"
    assert (driver.framework_id, driver.stream_id, driver.connected) == ("fw-1", "s-1", True)
    # A brand-new framework has no tasks to reconcile.
    assert transport.calls_of("Reconcile") == []
    await finish(driver, task)
    assert transport.closed and stream.cancelled.is_set()


async def test_offers_launch_through_fit_with_the_right_call_shape():
    class Launcher(Recorder):
        async def on_offers(self, driver, offers):
            result = fit(offers, [TaskSpec("t", cpus=1, mem=128, ports=1, command="echo hi")])
            for placement in result.placements:
                await driver.launch(placement.offers, placement.tasks, refuse_seconds=30)
            await driver.decline(result.unused, refuse_seconds=60)
            await super().on_offers(driver, offers)

    fw = Launcher()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    offers = [
        make_offer("o1", "agent-1", "cpus:2;mem:1024;ports:[31000-31009]"),
        make_offer("o2", "agent-2", "cpus:2;mem:1024"),
    ]
    stream.send(offers_event(offers))
    await fw.next("on_offers")
    accept = transport.calls_of("Accept")[0]
    assert (accept.framework_id, accept.stream_id) == ("fw-1", "s-1")
    assert list(accept.offer_ids) == ["o1"]
    assert accept.filters.refuse_seconds == 30
    (launched,) = accept.operations[0].launch.task_infos
    assert launched.command.shell == "echo hi" and launched.agent_id == "agent-1"
    ports = [r for r in launched.resources if r.name == "ports"][0]
    assert (ports.ranges[0].begin, ports.ranges[0].end) == (31000, 31000)
    decline = transport.calls_of("Decline")[0]
    assert list(decline.offer_ids) == ["o2"] and decline.filters.refuse_seconds == 60
    await finish(driver, task)


async def test_only_updates_with_a_uuid_are_acknowledged_after_on_update():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    stream.send(update_event("t-1", common_pb2.TASK_LOST))  # master-generated: no uuid
    stream.send(update_event("t-2", common_pb2.TASK_RUNNING, uuid=UUID, agent_id="agent-7"))
    await fw.next("on_update")
    await fw.next("on_update")
    _, ack = await transport.next_call("Acknowledge")
    assert (ack.framework_id, ack.stream_id) == ("fw-1", "s-1")
    assert (ack.task_id, ack.agent_id, ack.uuid) == ("t-2", "agent-7", UUID)
    assert len(transport.calls_of("Acknowledge")) == 1
    await finish(driver, task)


async def test_frameworks_can_opt_out_of_implicit_acknowledgements():
    class Manual(Recorder):
        implicit_acknowledgements = False

    fw = Manual()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    stream.send(update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    status = await fw.next("on_update")
    stream.send(heartbeat_event(), rescind_event("o-9"))  # a later event: on_update is done
    await fw.next("on_rescind")
    assert transport.calls_of("Acknowledge") == []
    await driver.acknowledge(status)
    assert transport.calls_of("Acknowledge")[0].uuid == UUID
    await finish(driver, task)


async def test_an_update_whose_callback_raises_is_not_acknowledged_and_the_driver_goes_on():
    class Buggy(Recorder):
        async def on_update(self, driver, status):
            await super().on_update(driver, status)
            if status.task_id == "bad":
                raise RuntimeError("bug in on_update")

    fw = Buggy()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    stream.send(update_event("bad", common_pb2.TASK_RUNNING, uuid=UUID))
    stream.send(update_event("good", common_pb2.TASK_RUNNING, uuid=b"\x02" * 16))
    _, ack = await transport.next_call("Acknowledge")
    assert ack.task_id == "good"
    assert [a.task_id for a in transport.calls_of("Acknowledge")] == ["good"]
    await finish(driver, task)


async def test_rescind_and_agent_lost_reach_the_framework_and_heartbeats_do_not():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), heartbeat_event(), rescind_event("o-1"), failure_event("a-1"))
    await fw.next("on_subscribed")
    assert await fw.events.get() == ("on_rescind", "o-1")
    assert await fw.events.get() == ("on_agent_lost", "a-1")
    await finish(driver, task)


async def test_a_broken_stream_reconnects_resubscribes_with_the_same_id_and_reconciles():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    await fw.next("on_subscribed")

    stream.fail(grpc.StatusCode.UNAVAILABLE, "master went away")
    await fw.next("on_disconnected")
    assert not driver.connected
    second = await transport.next_stream()
    assert second.request.framework.framework_id == "fw-1"
    assert transport.resets == 1  # the old connection was dropped, not reused

    second.send(subscribed("fw-1", stream_id="s-2"))
    assert await fw.next("on_subscribed") == "fw-1"
    # Implicit reconciliation on the new stream (no tasks named), before on_subscribed.
    (reconcile,) = transport.calls_of("Reconcile")
    assert (reconcile.framework_id, reconcile.stream_id, list(reconcile.tasks)) == (
        "fw-1",
        "s-2",
        [],
    )
    await finish(driver, task)


async def test_a_master_ending_the_stream_cleanly_is_also_reconnected():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    stream.end()
    await fw.next("on_disconnected")
    second = await transport.next_stream()
    assert second.request.framework.framework_id == "fw-1"
    await finish(driver, task)


async def test_a_silent_master_is_detected_after_three_heartbeat_intervals():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    # No event at all for 3 x 0.05 s after SUBSCRIBED: the path to the master is dead.
    stream.send(subscribed("fw-1", heartbeat_interval=0.05))
    await fw.next("on_disconnected")
    second = await transport.next_stream()
    assert second.request.framework.framework_id == "fw-1"
    assert stream.cancelled.is_set()
    await finish(driver, task)


async def test_a_master_that_never_answers_subscribe_is_retried():
    fw = Recorder()
    transport = MemoryTransport(timeout=TIMEOUT)
    driver = Driver(
        fw, transport, framework_info("t"), backoff=fast_backoff(), subscribe_timeout=0.05
    )
    task = asyncio.create_task(driver.run())
    first = await transport.next_stream()
    second = await transport.next_stream()
    assert first.cancelled.is_set() and second is not first
    await finish(driver, task)


async def test_offers_queued_before_a_break_are_dropped_but_updates_are_kept():
    release = asyncio.Event()

    class Slow(Recorder):
        async def on_offers(self, driver, offers):
            await super().on_offers(driver, offers)
            await release.wait()

    fw = Slow()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    stream.send(offers_event(make_offer("o1", "a", "cpus:1;mem:1")))
    await fw.next("on_offers")  # now busy inside on_offers
    stream.send(offers_event(make_offer("o2", "a", "cpus:1;mem:1")))
    stream.send(update_event("t-1", common_pb2.TASK_FINISHED))
    stream.fail()
    # The break is noticed while the callback is still busy: calls fail fast from now on.
    await eventually_async(lambda: not driver.connected, timeout=TIMEOUT)
    with pytest.raises(SchedulerError) as caught:
        await driver.revive()
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    release.set()
    assert (await fw.events.get())[0] == "on_update"
    assert (await fw.events.get())[0] == "on_disconnected"
    # Reconnecting waits for the framework to finish the old stream's events, in order.
    await transport.next_stream()
    await finish(driver, task)


async def test_a_call_refused_as_stale_resubscribes():
    outcome = asyncio.Queue()

    class Launcher(Recorder):
        async def on_offers(self, driver, offers):
            try:
                await driver.decline(offers)
            except SchedulerError as e:
                outcome.put_nowait((e.code, driver.connected))

    fw = Launcher()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    await fw.next("on_subscribed")
    transport.fail_next(
        "Decline", grpc.StatusCode.NOT_FOUND, "offer o1 is unknown", Reason.OFFER_UNKNOWN
    )
    stream.send(offers_event(make_offer("o1", "a", "cpus:1;mem:1")))
    # An unknown offer is an ordinary race: the stream stays.
    assert await asyncio.wait_for(outcome.get(), TIMEOUT) == (grpc.StatusCode.NOT_FOUND, True)

    transport.fail_next(
        "Decline",
        grpc.StatusCode.PERMISSION_DENIED,
        "stream s-1 is not the current stream",
        Reason.STREAM_STALE,
    )
    stream.send(offers_event(make_offer("o2", "a", "cpus:1;mem:1")))
    assert await asyncio.wait_for(outcome.get(), TIMEOUT) == (
        grpc.StatusCode.PERMISSION_DENIED,
        False,
    )
    second = await transport.next_stream()
    assert second.request.framework.framework_id == "fw-1"
    assert len(transport.streams) == 2
    await finish(driver, task)


# Which of the real master's refusals mean "subscribe again": tests/test_sdk_master_errors.py.


async def test_an_error_event_ends_the_driver_without_reconnecting():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), error_event("framework failed over"))
    assert await fw.next("on_error") == "framework failed over"
    with pytest.raises(SubscriptionEnded, match="failed over"):
        await asyncio.wait_for(task, TIMEOUT)
    assert len(transport.streams) == 1


async def test_a_refused_subscription_ends_the_driver():
    fw = Recorder()
    transport, driver, task, stream = await start(fw, framework_id="fw-gone")
    assert stream.request.framework.framework_id == "fw-gone"
    stream.fail(grpc.StatusCode.NOT_FOUND, "framework fw-gone was removed")
    assert await fw.next("on_error") == "framework fw-gone was removed"
    with pytest.raises(SubscriptionEnded):
        await asyncio.wait_for(task, TIMEOUT)


async def test_stop_inside_on_update_still_acknowledges_it():
    class StopsWhenDone(Recorder):
        async def on_update(self, driver, status):
            driver.stop()

    fw = StopsWhenDone()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    await asyncio.wait_for(task, TIMEOUT)  # run returns
    assert [a.task_id for a in transport.calls_of("Acknowledge")] == ["t-1"]


async def test_teardown_acknowledges_the_current_update_first_and_ends_run():
    class TearsDown(Recorder):
        async def on_update(self, driver, status):
            await driver.teardown()

    fw = TearsDown()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    await asyncio.wait_for(task, TIMEOUT)
    assert [name for name, _ in transport.calls] == ["Acknowledge", "Teardown"]


async def test_the_default_framework_declines_offers():
    transport, driver, task, stream = await start(Framework())
    stream.send(subscribed("fw-1"), offers_event(make_offer("o1", "a", "cpus:1;mem:1")))
    _, decline = await transport.next_call("Decline")
    assert list(decline.offer_ids) == ["o1"]
    await finish(driver, task)


async def test_calls_before_subscribing_fail_fast():
    transport, driver, task, stream = await start(Recorder())
    with pytest.raises(SchedulerError) as caught:
        await driver.suppress()
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert transport.calls == []
    await finish(driver, task)


async def test_driver_calls_build_the_requests_a_master_expects():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    await fw.next("on_subscribed")
    await driver.kill("t-1", agent_id="a-1", grace_period_seconds=2)
    await driver.reconcile(["t-1", ("t-2", "a-2")])
    await driver.revive()
    await driver.suppress()
    await driver.launch("o-1", [])  # no tasks: give the offer back
    kill, reconcile, revive, suppress, accept = (r for _, r in transport.calls)
    assert (kill.task_id, kill.agent_id, kill.grace_period_seconds) == ("t-1", "a-1", 2)
    assert [(t.task_id, t.agent_id) for t in reconcile.tasks] == [("t-1", ""), ("t-2", "a-2")]
    assert isinstance(revive, scheduler_pb2.ReviveRequest) and revive.stream_id == "s-1"
    assert isinstance(suppress, scheduler_pb2.SuppressRequest)
    assert list(accept.offer_ids) == ["o-1"] and list(accept.operations) == []
    assert not accept.HasField("filters")
    with pytest.raises(TypeError):
        await driver.launch("o-1", [TaskSpec("t", cpus=1, mem=1, command="true")])
    await finish(driver, task)


def test_backoff_grows_with_jitter_within_its_bounds_and_resets():
    backoff = Backoff(initial=0.2, cap=10.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(12)]
    assert 0.2 <= delays[0] <= 0.4  # the first retry is quick
    assert 0.4 <= delays[1] <= 0.8
    assert all(5.0 <= d <= 10.0 for d in delays[-4:])  # later ones stay near the cap
    assert len(set(delays)) == len(delays)  # jittered, not lockstep
    backoff.reset()
    assert backoff.next_delay() <= 0.4
    delays = [backoff.next_delay() for _ in range(1000)]
    assert all(5.0 <= d <= 10.0 for d in delays[10:])
    with pytest.raises(ValueError):
        Backoff(initial=0)


async def test_starting_with_a_framework_id_fails_over_and_reconciles_at_once():
    fw = Recorder()
    transport, driver, task, stream = await start(fw, framework_id="fw-earlier")
    assert stream.request.framework.framework_id == "fw-earlier"
    stream.send(subscribed("fw-earlier", stream_id="s-9"))
    assert await fw.next("on_subscribed") == "fw-earlier"
    (reconcile,) = transport.calls_of("Reconcile")
    assert reconcile.stream_id == "s-9" and list(reconcile.tasks) == []
    await finish(driver, task)


async def test_stop_from_outside_a_callback_ends_run_while_a_callback_is_busy():
    blocked = asyncio.Event()

    class Stuck(Recorder):
        async def on_offers(self, driver, offers):
            blocked.set()
            await asyncio.Event().wait()  # never returns by itself

    fw = Stuck()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), offers_event(make_offer("o1", "a", "cpus:1;mem:1")))
    await asyncio.wait_for(blocked.wait(), TIMEOUT)
    await finish(driver, task)
    assert transport.closed


# --- coalesced acknowledgements -------------------------------------------------------------


class GatedTransport(MemoryTransport):
    """Holds every Acknowledge call in flight until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__(timeout=TIMEOUT)
        self.gate = asyncio.Event()
        self.started: list[scheduler_pb2.AcknowledgeRequest] = []  # acks whose call began

    async def call(self, method, request):
        if method == "Acknowledge":
            self.started.append(request)
            await self.gate.wait()
        return await super().call(method, request)


async def start_gated(framework):
    transport = GatedTransport()
    driver = Driver(framework, transport, framework_info("test"), backoff=fast_backoff())
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1", stream_id="s-1"))
    await framework.next("on_subscribed")
    return transport, driver, task, stream


def acked(request: scheduler_pb2.AcknowledgeRequest) -> list[tuple[str, str, bytes]]:
    """Every (agent_id, task_id, uuid) a request acknowledges: the singular fields, the list."""
    entries = [(request.agent_id, request.task_id, request.uuid)] if request.uuid else []
    return entries + [(a.agent_id, a.task_id, a.uuid) for a in request.acknowledgements]


def uuid_of(n: int) -> bytes:
    return n.to_bytes(16, "big")


async def test_acks_queued_while_a_call_is_in_flight_go_out_together_in_the_next_call():
    fw = Recorder()
    transport, driver, task, stream = await start_gated(fw)
    stream.send(update_event("t-0", common_pb2.TASK_RUNNING, uuid=uuid_of(0)))
    # Idle: the first ack goes out at once, alone.
    await eventually_async(lambda: transport.started, timeout=TIMEOUT)
    assert [acked(r) for r in transport.started] == [[("agent-1", "t-0", uuid_of(0))]]
    # While it is in flight, nine more updates come in; their acks wait for it...
    for n in range(1, 10):
        stream.send(update_event(f"t-{n}", common_pb2.TASK_RUNNING, uuid=uuid_of(n)))
    stream.send(rescind_event("o-9"))  # a later event: every on_update before it is done
    await fw.next("on_rescind")
    assert len(transport.started) == 1
    # ...and go out together, in order, in one call naming the current stream.
    transport.gate.set()
    await eventually_async(lambda: len(transport.calls_of("Acknowledge")) == 2, timeout=TIMEOUT)
    second = transport.calls_of("Acknowledge")[1]
    assert (second.framework_id, second.stream_id) == ("fw-1", "s-1")
    assert acked(second) == [("agent-1", f"t-{n}", uuid_of(n)) for n in range(1, 10)]
    await finish(driver, task)
    assert len(transport.calls_of("Acknowledge")) == 2


async def test_a_burst_of_updates_is_acknowledged_in_fewer_calls_than_updates():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    sent = [("agent-1", f"t-{n}", uuid_of(n)) for n in range(50)]
    stream.send(*(update_event(t, common_pb2.TASK_RUNNING, uuid=u) for _, t, u in sent))

    def all_acked():
        done = [e for r in transport.calls_of("Acknowledge") for e in acked(r)]
        return sorted(done) == sorted(sent)

    await eventually_async(all_acked, timeout=TIMEOUT)
    assert len(transport.calls_of("Acknowledge")) < len(sent)
    await finish(driver, task)


async def test_a_lone_update_is_acknowledged_without_waiting_for_more():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), update_event("t-1", common_pb2.TASK_RUNNING, uuid=UUID))
    # No other event follows: a batcher waiting to fill up would never send it.
    _, ack = await transport.next_call("Acknowledge")
    assert (ack.task_id, ack.uuid, list(ack.acknowledgements)) == ("t-1", UUID, [])
    await finish(driver, task)


async def test_stop_waits_for_acks_queued_behind_a_call_in_flight():
    fw = Recorder()
    transport, driver, task, stream = await start_gated(fw)
    for n in range(5):
        stream.send(update_event(f"t-{n}", common_pb2.TASK_RUNNING, uuid=uuid_of(n)))
    stream.send(rescind_event("o-1"))
    await fw.next("on_rescind")
    await eventually_async(lambda: transport.started, timeout=TIMEOUT)
    driver.stop()
    # Let the driver run as far as it can with the first call still in flight (loop turns,
    # not time): without the wait for the acks, run would be over long before this.
    for _ in range(50):
        await asyncio.sleep(0)
    assert not task.done() and not stream.cancelled.is_set()
    transport.gate.set()
    await asyncio.wait_for(task, TIMEOUT)
    done = [e for r in transport.calls_of("Acknowledge") for e in acked(r)]
    assert done == [("agent-1", f"t-{n}", uuid_of(n)) for n in range(5)]


async def test_a_batch_refused_for_one_bad_entry_is_sent_again_one_by_one():
    fw = Recorder()
    transport, driver, task, stream = await start_gated(fw)

    def master(method, request):
        # Like the master: a batch with a bad entry is refused whole, nothing applied.
        if method == "Acknowledge" and any(t == "bad" for _, t, _ in acked(request)):
            raise SchedulerError(
                grpc.StatusCode.NOT_FOUND,
                "acknowledgements[0] (task 'bad'): agent 'agent-gone' is not registered",
            )
        applied.extend(acked(request))

    applied = []
    transport.handler = master
    stream.send(update_event("t-0", common_pb2.TASK_RUNNING, uuid=uuid_of(0)))
    await eventually_async(lambda: transport.started, timeout=TIMEOUT)
    stream.send(update_event("t-1", common_pb2.TASK_RUNNING, uuid=uuid_of(1)))
    stream.send(
        update_event("bad", common_pb2.TASK_RUNNING, uuid=uuid_of(2), agent_id="agent-gone")
    )
    stream.send(update_event("t-3", common_pb2.TASK_RUNNING, uuid=uuid_of(3)))
    stream.send(rescind_event("o-1"))
    await fw.next("on_rescind")
    transport.gate.set()
    good = [("agent-1", f"t-{n}", uuid_of(n)) for n in (0, 1, 3)]
    await eventually_async(lambda: sorted(applied) == good, timeout=TIMEOUT)
    # Refused as a batch of three, then one call each: only the bad one failed.
    assert [len(acked(r)) for r in transport.calls_of("Acknowledge")] == [1, 3, 1, 1, 1]
    assert driver.connected  # an entry-level error is not a stale stream
    await finish(driver, task)


async def test_an_explicit_acknowledge_raises_when_the_master_refuses_it():
    class Manual(Recorder):
        implicit_acknowledgements = False

    fw = Manual()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    status = await fw.next("on_update")
    transport.fail_next("Acknowledge", grpc.StatusCode.INVALID_ARGUMENT, "uuid must be 16 bytes")
    with pytest.raises(SchedulerError) as caught:
        await driver.acknowledge(status)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    await driver.acknowledge(status)  # fixed and sent again: one call, the update's own
    ack = transport.calls_of("Acknowledge")[-1]
    assert acked(ack) == [("agent-1", "t-1", UUID)]
    await finish(driver, task)


async def test_a_backlog_is_sent_in_calls_of_bounded_size_in_order():
    calls = []

    async def send(statuses):
        calls.append([s.task_id for s in statuses])

    batcher = AckBatcher(send, max_per_call=2)
    for n in range(5):
        batcher.add(common_pb2.TaskStatus(task_id=f"t-{n}", uuid=uuid_of(n)))
    await batcher.drain()
    assert calls == [["t-0", "t-1"], ["t-2", "t-3"], ["t-4"]]
    with pytest.raises(ValueError):
        AckBatcher(send, max_per_call=0)


def test_one_backoff_serves_retries_restarts_and_reconnects():
    from agora.common.backoff import exponential
    from agora.frameworks.batch.state import Backoff as RetryBackoff
    from agora.frameworks.service.backoff import RestartBackoff

    assert [exponential(n, 1.0, 2.0, 5.0) for n in range(5)] == [0.0, 1.0, 2.0, 4.0, 5.0]
    assert exponential(10**6, 1.0, 1.15, 300.0) == 300.0  # no overflow after a long crash loop
    # The batch retry and the service restart delays are that function, with their parameters.
    assert [RetryBackoff(1.0, 2.0, 5.0).delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    restart = RestartBackoff(1.0, 2.0, 5.0)
    restart.failed(0.0)
    restart.failed(0.0)
    assert restart.delay() == exponential(2, 1.0, 2.0, 5.0) == 2.0


# --- making updates durable before they are acknowledged ------------------------------------


class Deferring(Recorder):
    """Writes what its updates changed only in before_acknowledging (as the batch framework
    commits a burst of them at once); `broken` makes that write fail."""

    def __init__(self, transport_calls):
        super().__init__()
        self.noted: list[str] = []
        self.written: list[str] = []
        self.broken = False
        self.calls = transport_calls  # the transport's calls, to see what went out first

    async def on_update(self, driver, status):
        self.noted.append(status.task_id)
        await super().on_update(driver, status)

    async def before_acknowledging(self, driver):
        if self.broken:
            raise OSError("disk full")
        # Nothing of these updates was acknowledged before they were written.
        acked_so_far = {e[1] for name, r in self.calls if name == "Acknowledge" for e in acked(r)}
        assert not acked_so_far & set(self.noted)
        self.written.extend(self.noted)
        self.noted.clear()


async def test_updates_are_acknowledged_only_after_the_framework_made_them_durable():
    transport = MemoryTransport(timeout=TIMEOUT)
    fw = Deferring(transport.calls)
    driver = Driver(fw, transport, framework_info("test"), backoff=fast_backoff())
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"))
    sent = [f"t-{n}" for n in range(20)]
    stream.send(
        *(update_event(t, common_pb2.TASK_RUNNING, uuid=uuid_of(n)) for n, t in enumerate(sent))
    )

    def all_acked():
        return sorted(e[1] for r in transport.calls_of("Acknowledge") for e in acked(r)) == sorted(
            sent
        )

    await eventually_async(all_acked, timeout=TIMEOUT)
    assert sorted(fw.written) == sorted(sent)
    await finish(driver, task)


async def test_updates_that_cannot_be_made_durable_are_not_acknowledged():
    transport = MemoryTransport(timeout=TIMEOUT)
    fw = Deferring(transport.calls)
    fw.broken = True
    driver = Driver(fw, transport, framework_info("test"), backoff=fast_backoff())
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"), update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    await fw.next("on_update")
    stream.send(rescind_event("o-1"))  # a later event: the ack's turn has come and gone
    await fw.next("on_rescind")
    await driver._flush_acks()
    assert transport.calls_of("Acknowledge") == []
    # The agent sends it again (it was not acknowledged); now the write works: acknowledged.
    fw.broken = False
    stream.send(update_event("t-1", common_pb2.TASK_FINISHED, uuid=UUID))
    _, ack = await transport.next_call("Acknowledge")
    assert (ack.task_id, ack.uuid) == ("t-1", UUID)
    assert fw.written == ["t-1", "t-1"]
    await finish(driver, task)
