"""The SDK classifies the real master's refusals by their reason (ErrorInfo), not their text:
the ones that mean "your framework or stream is no longer the master's" make it subscribe
again; an unknown offer, task or agent does not."""

from __future__ import annotations

import grpc
import pytest

from agora.common.errors import Reason
from agora.frameworks.sdk import SchedulerError, framework_info, is_stale_stream_error
from agora.frameworks.sdk.transport import GrpcSchedulerTransport
from agora.master import Master, MasterConfig
from agora.v1 import scheduler_pb2

UUID = bytes(16)


@pytest.fixture
async def master():
    m = Master(MasterConfig(port=0, heartbeat_interval_seconds=0.5))
    await m.start()
    yield m
    await m.stop(0)


async def subscribe(transport, name: str) -> tuple[str, str, object]:
    stream = transport.subscribe(scheduler_pb2.SubscribeRequest(framework=framework_info(name)))
    async for event in stream:
        if event.HasField("subscribed"):
            return event.subscribed.framework_id, event.subscribed.stream_id, stream
    raise AssertionError("no SUBSCRIBED event")


async def refusal(transport, method: str, **fields) -> SchedulerError:
    request = getattr(scheduler_pb2, f"{method}Request")(**fields)
    with pytest.raises(SchedulerError) as caught:
        await transport.call(method, request)
    return caught.value


async def test_the_masters_refusals_carry_reasons_the_sdk_acts_on(master):
    transport = GrpcSchedulerTransport(master.address)
    framework_id, stream_id, stream = await subscribe(transport, "reasons")
    mine = {"framework_id": framework_id, "stream_id": stream_id}
    cases = [
        ("Decline", {**mine, "offer_ids": ["offer-nope"]}, Reason.OFFER_UNKNOWN, False),
        (
            "Kill",
            {**mine, "task_id": "t", "grace_period_seconds": -1},
            Reason.INVALID_REQUEST,
            False,
        ),
        (
            "Acknowledge",
            {**mine, "agent_id": "agent-nope", "task_id": "t", "uuid": UUID},
            Reason.AGENT_UNKNOWN,
            False,
        ),
        ("Revive", {**mine, "stream_id": "stream-old"}, Reason.STREAM_STALE, True),
        (
            "Revive",
            {"framework_id": "framework-nope", "stream_id": "s"},
            Reason.FRAMEWORK_UNKNOWN,
            True,
        ),
    ]
    for method, fields, reason, stale in cases:
        error = await refusal(transport, method, **fields)
        assert (error.reason, is_stale_stream_error(error)) == (reason, stale), (method, error)
        assert error.message  # and still a message for people
    # A torn-down framework: its id is gone for good.
    await transport.call("Teardown", scheduler_pb2.TeardownRequest(**mine))
    error = await refusal(transport, "Revive", **mine)
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, Reason.FRAMEWORK_REMOVED)
    assert is_stale_stream_error(error)
    stream.cancel()
    await transport.close()


async def test_a_lost_connection_has_no_reason_and_is_not_stale():
    transport = GrpcSchedulerTransport("127.0.0.1:1", call_timeout=2)
    error = await refusal(transport, "Revive", framework_id="f", stream_id="s")
    assert error.code == grpc.StatusCode.UNAVAILABLE and error.reason is None
    assert not is_stale_stream_error(error) and error.transient
    await transport.close()
