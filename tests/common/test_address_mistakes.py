"""Addresses given out wrongly, named as such: a certificate that does not name the address its
daemon is reached at (said by the daemon at start and by the client that meets it), and a
framework daemon that published a loopback address to a master on another machine."""

from __future__ import annotations

import grpc
import pytest

from agora.common.addresses import loopback_published, source_address_towards
from agora.common.certificates import init_ca, issue, unnamed_address
from agora.common.credentials import Credentials, aio_channel
from agora.common.failures import Cause, classify_error
from agora.common.rpc import bind, new_server
from agora.v1 import operator_pb2, operator_pb2_grpc


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    init_ca(directory)
    issue(directory, "agent-2", "agent", ["10.0.0.3"])
    issue(directory, "ops", "client")
    return directory


def test_a_certificate_is_checked_against_the_address_its_daemon_gives_out(certs):
    pem = (certs / "agent-2.pem").read_bytes()
    assert unnamed_address(pem, "10.0.0.3:5051", "agora agent") is None
    assert unnamed_address(pem, "127.0.0.1:5051", "agora agent") is None  # always named
    assert unnamed_address(pem, "0.0.0.0:5051", "agora agent") is None  # not an address given
    why = unnamed_address(pem, "10.0.0.2:5051", "agora agent")
    assert why is not None
    assert "names localhost, 10.0.0.3, 127.0.0.1, ::1, not 10.0.0.2" in why
    assert "agora tls issue ... --host 10.0.0.2" in why


async def test_a_client_meeting_a_certificate_for_another_address_is_told_so(certs):
    # 127.0.0.2 is loopback too, but the agent's certificate does not name it.
    daemon = Credentials.load(certs / "ca.pem", certs / "agent-2.pem", certs / "agent-2-key.pem")
    ops = Credentials.load(certs / "ca.pem", certs / "ops.pem", certs / "ops-key.pem")
    server = new_server(credentials=daemon)
    address = f"127.0.0.2:{bind(server, '127.0.0.2:0', daemon)}"
    await server.start()
    channel = aio_channel(address, ops, [])
    try:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            stub = operator_pb2_grpc.OperatorStub(channel)
            await stub.ListMasters(operator_pb2.ListMastersRequest(), timeout=5)
        failure = classify_error(raised.value, address, ops, what="the agent")
    finally:
        await channel.close()
        await server.stop(None)
    assert failure.cause is Cause.TLS
    assert f"the certificate {address} presents does not name 127.0.0.2" in failure.message
    assert "--host 127.0.0.2" in failure.message


def test_a_loopback_address_published_to_a_master_elsewhere_is_named():
    # Only a loopback address, seen through a master on another machine, is the cause.
    assert loopback_published("10.0.0.1:40000", "10.0.0.1:5050", "agora batch") is None
    assert loopback_published("127.0.0.1:40000", "127.0.0.1:5050", "agora batch") is None
    assert loopback_published("127.0.0.1:40000", "localhost:5050", "agora batch") is None
    remote = "192.0.2.1:5050"  # TEST-NET-1: routed by a default route, never dialled here
    if source_address_towards(remote) in (None, "127.0.0.1"):
        pytest.skip("this machine has no route off loopback")
    why = loopback_published("127.0.0.1:40000", remote, "agora batch")
    assert why is not None
    assert why.startswith("`agora batch` published 127.0.0.1:40000 to the master")
    assert "--host" in why
    assert loopback_published("127.0.0.1:40000", f"zk://{remote.split(':')[0]}:2181/agora", "x")
