"""Issue 37, item 3: refused calls hold none of the master's memory, and no principal holds
more than its share of calls and streams (common/call_gate.py). A real master process over
mutual TLS with ACLs; memory read from /proc as an operator would (VmRSS, and VmHWM: the peak,
reset before each part)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from harness import Daemon, agora

from agora.common.credentials import Credentials
from agora.common.rpc import open_channel
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

pytestmark = pytest.mark.e2e

ACLS = """
register_frameworks: [{principals: [fw], roles: ["*"]}]
set_weights: [{principals: [ops], roles: [ANY]}]
read_state: [{principals: [ops]}]
"""
MB = 1024 * 1024


def memory_mb(pid: int) -> tuple[int, int]:
    """(resident now, resident at its peak since the last reset), in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@pytest.fixture
def master(tmp_path):
    certs = tmp_path / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    for name, kind in [("master", "master"), ("ops", "client"), ("eve", "client")] + [
        ("fw", "framework")
    ]:
        assert (
            agora("tls", "issue", "--ca", str(certs), "--name", name, "--for", kind).returncode == 0
        )
    (tmp_path / "acls.yaml").write_text(ACLS)
    daemon = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m"), "--acls"]
        + [str(tmp_path / "acls.yaml"), "--max-streams-per-principal", "8"]
        + ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "master.pem")]
        + ["--tls-key", str(certs / "master-key.pem")],
        tmp_path / "master.log",
    ).start()
    daemon.certs = certs
    yield daemon
    daemon.stop()


def credentials(master, name: str) -> Credentials:
    certs = master.certs
    return Credentials.load(certs / "ca.pem", certs / f"{name}.pem", certs / f"{name}-key.pem")


async def sixteen_huge_weights(master, name: str) -> set[tuple[str, str]]:
    """16 concurrent UpdateWeight calls of 60 MB each, as `name`: their outcomes."""
    channel = open_channel(f"localhost:{master.port}", credentials(master, name))
    stub = operator_pb2_grpc.OperatorStub(channel)
    request = operator_pb2.UpdateWeightRequest(role="r" * (60 * MB), weight=2)
    results = await asyncio.gather(
        *(stub.UpdateWeight(request, timeout=120) for _ in range(16)), return_exceptions=True
    )
    await channel.close()
    return {
        (r.code().name, r.details()) if isinstance(r, grpc.RpcError) else ("OK", "")
        for r in results
    }


async def test_refused_huge_calls_leave_the_masters_memory_as_it_was(master):
    pid = master.proc.pid
    await asyncio.sleep(1.0)  # settled after start
    idle, _ = memory_mb(pid)
    reset_peak(pid)
    # A certificate of the CA that no rule names: refused before a byte of its request is read.
    outcomes = await sixteen_huge_weights(master, "eve")
    assert outcomes == {
        (
            "PERMISSION_DENIED",
            "eve is named by no rule of this server's ACLs, so it may not call "
            "Operator.UpdateWeight (nor anything else here): nothing it sends is read",
        )
    }
    now, peak = memory_mb(pid)
    assert peak - idle < 100, (idle, peak)
    assert now - idle < 100, (idle, now)
    # A principal the rules name is read, but refused for the size before anything is parsed,
    # and what reading took is given back.
    outcomes = await sixteen_huge_weights(master, "ops")
    assert {code for code, _ in outcomes} == {"RESOURCE_EXHAUSTED"}
    assert "UpdateWeight: a request of 62914574 bytes; this call takes at most 4194304" in {
        details for _, details in outcomes
    }
    for _ in range(20):
        now, _ = memory_mb(pid)
        if now - idle < 100:
            break
        await asyncio.sleep(0.1)
    assert now - idle < 100, (idle, now)
    # A normal call of the same principal still goes through.
    channel = open_channel(f"localhost:{master.port}", credentials(master, "ops"))
    await operator_pb2_grpc.OperatorStub(channel).UpdateWeight(
        operator_pb2.UpdateWeightRequest(role="analytics", weight=2)
    )
    await channel.close()


async def test_health_checks_are_open_but_small(master):
    """Health and reflection answer any certificate of the CA (with --tokens, anyone who
    reaches the port): a request of theirs larger than 64 KB is refused unparsed."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with open_channel(f"localhost:{master.port}", credentials(master, "eve")) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        ok = await health.Check(health_pb2.HealthCheckRequest(service="agora.v1.Scheduler"))
        assert ok.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await health.Check(health_pb2.HealthCheckRequest(service="s" * MB))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "Check: a request of" in e.value.details()


async def test_one_principal_opens_no_more_streams_than_its_share(master):
    channel = open_channel(f"localhost:{master.port}", credentials(master, "fw"))
    stub = scheduler_pb2_grpc.SchedulerStub(channel)
    calls = []
    try:
        for i in range(8):
            info = common_pb2.FrameworkInfo(name=f"fw-{i}", user="nobody", role="*")
            call = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
            assert (await call.read()).HasField("subscribed")
            calls.append(call)
        info = common_pb2.FrameworkInfo(name="fw-9", user="nobody", role="*")
        ninth = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await ninth.read()
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "fw has 8 streams open to this server; at most 8" in e.value.details()
        calls.pop().cancel()  # one closes: another may open
        await asyncio.sleep(0.2)
        again = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
        assert (await again.read()).HasField("subscribed")
        calls.append(again)
    finally:
        for call in calls:
            call.cancel()
        await channel.close()
