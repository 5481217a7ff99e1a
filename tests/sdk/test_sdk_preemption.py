"""Preemption through the SDK (issue 34, item 4), the test playing the master over the in-memory
transport: a framework hears that a task is being stopped (on_preemption) before its final
update, and tells the master what it waits to place (driver.demand) only when that changes."""

import asyncio
import time

import grpc
import pytest
from test_sdk_driver import TIMEOUT, Recorder, finish, start

from agora.common import Resources
from agora.common.task_states import REASON_PREEMPTED
from agora.frameworks.sdk import Framework, SchedulerError
from agora.frameworks.sdk.testing import subscribed
from agora.v1 import common_pb2, scheduler_pb2

MESSAGE = "preempted: role b needs cpus:0.5;mem:64 (guarantee)"


class Listener(Recorder):
    async def on_preemption(self, driver, task_id, agent_id, message, deadline):
        self.events.put_nowait(("on_preemption", (task_id, agent_id, message, deadline)))


def notice(task_id: str, deadline: float) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(
        preemption=scheduler_pb2.Event.PreemptionNotice(
            task_id=task_id, agent_id="agent-1", message=MESSAGE, deadline=deadline
        )
    )


def killed(task_id: str) -> scheduler_pb2.Event:
    status = common_pb2.TaskStatus(
        task_id=task_id,
        state=common_pb2.TASK_KILLED,
        agent_id="agent-1",
        reason=REASON_PREEMPTED,
        message=MESSAGE,
        uuid=b"\x02" * 16,
        source=common_pb2.TaskStatus.SOURCE_AGENT,
    )
    return scheduler_pb2.Event(update=scheduler_pb2.Event.Update(status=status))


async def test_the_notice_comes_to_on_preemption_before_the_tasks_final_update():
    fw = Listener()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    await fw.next("on_subscribed")
    deadline = time.time() + 3
    stream.send(notice("web-1", deadline), killed("web-1"))
    assert await fw.events.get() == ("on_preemption", ("web-1", "agent-1", MESSAGE, deadline))
    name, status = await fw.events.get()
    assert name == "on_update"
    assert (status.state, status.reason, status.message) == (
        common_pb2.TASK_KILLED,
        REASON_PREEMPTED,
        MESSAGE,
    )
    # The final update is acknowledged as any other.
    _, ack = await transport.next_call("Acknowledge")
    assert (ack.task_id, ack.uuid) == ("web-1", b"\x02" * 16)
    await finish(driver, task)


async def test_a_framework_without_on_preemption_goes_on_handling_events():
    class Plain(Framework):
        def __init__(self):
            self.updates: asyncio.Queue = asyncio.Queue()

        async def on_update(self, driver, status):
            self.updates.put_nowait(status)

    fw = Plain()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"), notice("web-1", time.time() + 3), killed("web-1"))
    status = await asyncio.wait_for(fw.updates.get(), TIMEOUT)
    assert status.reason == REASON_PREEMPTED  # the default callback logged the notice only
    assert driver.connected
    await finish(driver, task)


async def test_demand_is_sent_when_it_changes_and_again_on_a_new_subscription():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1", stream_id="s-1"))
    await fw.next("on_subscribed")
    half = Resources.parse("cpus:0.5;mem:64")

    await driver.demand(half, priority=3)
    await driver.demand(half, priority=3)  # unchanged: not sent again
    (first,) = transport.calls_of("Demand")
    assert (first.framework_id, first.stream_id, first.priority) == ("fw-1", "s-1", 3)
    assert Resources.from_proto(first.unmet) == half

    await driver.demand(half, priority=5)  # a higher priority is news to the master
    await driver.demand(None)  # nothing waits any more: an empty demand clears it
    await driver.demand(None)
    sent = transport.calls_of("Demand")
    assert [(d.priority, Resources.from_proto(d.unmet)) for d in sent[1:]] == [
        (5, half),
        (0, Resources()),
    ]

    # A new subscription starts with no demand at the master: the same demand goes again.
    await driver.demand(half)
    stream.fail(grpc.StatusCode.UNAVAILABLE, "master went away")
    await fw.next("on_disconnected")
    second = await transport.next_stream()
    second.send(subscribed("fw-1", stream_id="s-2"))
    await fw.next("on_subscribed")
    await driver.demand(half)
    last = transport.calls_of("Demand")[-2:]
    assert [d.stream_id for d in last] == ["s-1", "s-2"]
    assert Resources.from_proto(last[1].unmet) == half
    await finish(driver, task)


async def test_a_refused_demand_is_sent_again_next_time():
    fw = Recorder()
    transport, driver, task, stream = await start(fw)
    stream.send(subscribed("fw-1"))
    await fw.next("on_subscribed")
    half = Resources.parse("cpus:0.5;mem:64")
    transport.fail_next("Demand", grpc.StatusCode.UNAVAILABLE, "leader changing")
    with pytest.raises(SchedulerError, match="leader changing"):
        await driver.demand(half)  # the master did not take it
    await driver.demand(half)  # not taken before, so sent again
    assert len(transport.calls_of("Demand")) == 2
    await finish(driver, task)
