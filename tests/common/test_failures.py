"""The one classifier of failed connections (common/failures.py), against real servers on
loopback: a closed port, a TLS server called in plaintext and the reverse, the master's
dashboard port, a gRPC server without the service, a name that does not resolve. And the
backoff and the repeat filter that decide when to retry and how loudly to say so."""

from __future__ import annotations

import random
import socket

import grpc
import pytest
from master_harness import start_master

from agora.common.backoff import Backoff
from agora.common.certificates import init_ca, issue
from agora.common.credentials import INSECURE, Credentials, aio_channel
from agora.common.failures import Cause, RepeatFilter, classify, classify_error
from agora.common.rpc import bind, new_server
from agora.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc


async def _call(address: str, credentials: Credentials = INSECURE, timeout: float = 5.0):
    """Operator.ListMasters at `address`: the error it fails with (None if it succeeds)."""
    channel = aio_channel(address, credentials, [])
    try:
        await operator_pb2_grpc.OperatorStub(channel).ListMasters(
            operator_pb2.ListMastersRequest(), timeout=timeout
        )
        return None
    except grpc.aio.AioRpcError as e:
        return e
    finally:
        await channel.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    init_ca(directory)
    issue(directory, "master", "master", ["127.0.0.1"])
    issue(directory, "ops", "client")

    def load(name: str) -> Credentials:
        return Credentials.load(
            directory / "ca.pem", directory / f"{name}.pem", directory / f"{name}-key.pem"
        )

    return load


async def test_a_closed_port_is_refused():
    address = f"127.0.0.1:{_closed_port()}"
    failure = classify_error(await _call(address), address)
    assert failure.cause is Cause.REFUSED
    assert f"cannot reach the master at {address} (connection refused)" in failure.message
    assert "--host" in failure.message  # a master on loopback is the likely cause


async def test_a_name_that_does_not_resolve_is_a_dns_failure():
    address = "no-such-host.invalid:5050"
    failure = classify_error(await _call(address), address)
    assert failure.cause is Cause.DNS
    assert "'no-such-host.invalid' does not resolve" in failure.message


async def test_a_listener_that_never_answers_is_no_answer():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        failure = classify_error(await _call(address, timeout=0.5), address)
    assert failure.cause is Cause.UNREACHABLE
    assert "no answer" in failure.message


async def test_tls_and_plaintext_each_name_the_other(certs):
    master_creds = certs("master")
    tls_server = new_server(credentials=master_creds)
    tls_port = bind(tls_server, "127.0.0.1:0", master_creds)
    plain_server = new_server()
    plain_port = bind(plain_server, "127.0.0.1:0")
    await tls_server.start()
    await plain_server.start()
    try:
        tls_address, plain_address = f"127.0.0.1:{tls_port}", f"127.0.0.1:{plain_port}"
        plain_to_tls = classify_error(await _call(tls_address), tls_address)
        assert plain_to_tls.cause is Cause.TLS
        assert f"{tls_address} speaks TLS: give --tls-ca" in plain_to_tls.message
        ops = certs("ops")
        tls_to_plain = classify_error(await _call(plain_address, ops), plain_address, ops)
        assert tls_to_plain.cause is Cause.TLS
        assert "does not speak TLS" in tls_to_plain.message
        # Both speak gRPC (and TLS agrees) but neither serves the Operator service.
        wrong = classify_error(await _call(tls_address, ops), tls_address, ops)
        assert wrong.cause is Cause.WRONG_SERVICE and "does not serve" in wrong.message
    finally:
        await tls_server.stop(None)
        await plain_server.stop(None)


async def test_the_dashboard_port_and_the_wrong_daemon_are_the_wrong_service(tmp_path, caplog):
    master = await start_master(tmp_path, http_port=0)
    try:
        dashboard = master.http_address
        assert dashboard is not None
        failure = classify_error(await _call(dashboard), dashboard)
        assert failure.cause is Cause.WRONG_SERVICE
        assert "answers HTTP/1, not gRPC" in failure.message and "--port" in failure.message
        # ... and the master's log has one line for it, not aiohttp's traceback.
        bad = [r for r in caplog.records if r.name == "aiohttp.server"]
        assert bad and all(r.exc_info is None for r in bad), bad
        assert "gRPC client given the HTTP port" in bad[0].getMessage()
        # The master's gRPC port called for the Agent service (an agent's --master pointed the
        # other way round, say).
        channel = aio_channel(master.address, INSECURE, [])
        try:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await agent_pb2_grpc.AgentStub(channel).ListTasks(
                    agent_pb2.ListAgentTasksRequest(), timeout=5
                )
        finally:
            await channel.close()
        wrong = classify_error(raised.value, master.address, what="the agent", service="Agent")
        assert wrong.cause is Cause.WRONG_SERVICE
        assert "does not serve the Agent service" in wrong.message
    finally:
        await master.stop()


def test_a_refusal_names_what_the_daemon_said():
    failure = classify(
        grpc.StatusCode.PERMISSION_DENIED, "ops may not register agent ''", "10.0.0.1:5050"
    )
    assert failure.cause is Cause.DENIED
    assert "ops may not register agent ''" in failure.message
    assert "PERMISSION_DENIED" in failure.message
    assert classify(grpc.StatusCode.UNAUTHENTICATED, "no token", "m:1").cause is Cause.DENIED


def test_an_exception_that_is_not_grpc_keeps_its_words():
    failure = classify_error(ConnectionError("no master of zk://z:2181/a is leading yet"), "zk")
    assert failure.cause is Cause.OTHER and "is leading yet" in failure.message


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_failure_is_said_once_then_reminded_now_and_then():
    clock = _Clock()
    said = RepeatFilter(remind=60.0, clock=clock)
    refused = classify(grpc.StatusCode.PERMISSION_DENIED, "ops may not register agent ''", "m:1")
    levels = []
    for _ in range(10):  # every 0.4 s for 4 s
        levels.append(said.level(refused))
        clock.now += 0.4
    assert levels == ["warning"] + ["debug"] * 9
    clock.now = 61.0
    assert said.level(refused) == "info"  # still failing: a reminder, not a new warning
    other = classify(grpc.StatusCode.PERMISSION_DENIED, "ops may not register agent 'a'", "m:1")
    assert said.level(other) == "warning"  # different words: said again
    said.reset()
    assert said.level(other) == "warning"


class _Fixed(random.Random):
    """A random source that always draws `value`."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999])
def test_the_backoff_doubles_with_jitter_up_to_ten_seconds(draw):
    backoff = Backoff(rng=_Fixed(draw))  # the defaults every retrying loop uses
    delays = [backoff.next_delay() for _ in range(12)]
    # Attempt n is drawn from [b/2, b] where b = min(10, 0.2 * 2 ** n), never below 0.2:
    # 0.2-0.4 s, 0.4-0.8 s, ..., 5-10 s.
    bands = [min(10.0, 0.2 * 2**n) for n in range(1, 13)]
    for delay, high in zip(delays, bands, strict=True):
        low = max(0.2, high / 2)
        assert delay == pytest.approx(low + (high - low) * draw)
    assert max(delays) <= 10.0 and delays[-1] >= 5.0  # capped at 10 s, still jittered
    assert delays[0] < 1.0  # the first retry comes soon
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(delays[0])
