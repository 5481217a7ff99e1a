"""`agora tls`: a CA and certificates that real gRPC mutual TLS accepts, made by the command."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


def agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args], capture_output=True, text=True, timeout=60
    )


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> Path:
    ca_dir = tmp_path_factory.mktemp("ca")
    result = agora("tls", "init", str(ca_dir))
    assert result.returncode == 0, result.stderr
    return ca_dir


def test_init_writes_a_ca_with_a_private_key(ca):
    cert = load(ca / "ca.pem")
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert stat.S_IMODE((ca / "ca-key.pem").stat().st_mode) == 0o600
    # A second init would orphan every certificate issued so far: refused without --force.
    again = agora("tls", "init", str(ca))
    assert again.returncode == 1
    assert "already exist" in again.stderr and "--force" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def test_issue_signs_a_daemon_certificate_naming_its_hosts(ca, tmp_path):
    result = agora(
        "tls", "issue", "--ca", str(ca), "--name", "agent-7", "--for", "agent",
        "--host", "10.1.2.3", "--host", "node7.example", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    cert = load(tmp_path / "agent-7.pem")
    cert.verify_directly_issued_by(load(ca / "ca.pem"))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "agent-7"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"node7.example", "localhost"}
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {
        "10.1.2.3",
        "127.0.0.1",
        "::1",
    }
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert stat.S_IMODE((tmp_path / "agent-7-key.pem").stat().st_mode) == 0o600


def test_a_client_certificate_is_for_clients_only(ca, tmp_path):
    result = agora(
        "tls", "issue", "--ca", str(ca), "--name", "alice", "--for", "client",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--tls-cert" in result.stdout  # says how to use it
    cert = load(tmp_path / "alice.pem")
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--name", "x", "--for", "client"], "create a CA first"),  # --ca names no CA
        (["--name", "a/b", "--for", "client"], "no slashes"),
        (["--name", "x", "--for", "master", "--host", "bad host"], "DNS name or an IP"),
    ],
)
def test_bad_requests_get_one_line_and_exit_1(ca, tmp_path, argv, message):
    ca_dir = tmp_path / "nothing" if message == "create a CA first" else ca
    result = agora("tls", "issue", "--ca", str(ca_dir), "--out", str(tmp_path), *argv)
    assert result.returncode == 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_kind_is_a_usage_error(ca):
    result = agora("tls", "issue", "--ca", str(ca), "--name", "x", "--for", "root")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def _issue(ca: Path, name: str, kind: str, out: Path) -> tuple[bytes, bytes]:
    result = agora(
        "tls", "issue", "--ca", str(ca), "--name", name, "--for", kind, "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    return (out / f"{name}.pem").read_bytes(), (out / f"{name}-key.pem").read_bytes()


async def test_grpc_mutual_tls_accepts_the_ca_and_refuses_another(ca, tmp_path):
    root = (ca / "ca.pem").read_bytes()
    server_cert, server_key = _issue(ca, "master", "master", tmp_path)
    client_cert, client_key = _issue(ca, "alice", "client", tmp_path)
    other_ca = tmp_path / "other-ca"
    assert agora("tls", "init", str(other_ca)).returncode == 0
    stranger_cert, stranger_key = _issue(other_ca, "mallory", "client", tmp_path / "other")

    seen: list[str] = []

    class Health(health.HealthServicer):
        def Check(self, request, context):  # noqa: N802 - gRPC's name
            seen.extend(n.decode() for n in context.auth_context().get("x509_common_name", []))
            return super().Check(request, context)

    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    creds = grpc.ssl_server_credentials(
        [(server_key, server_cert)], root_certificates=root, require_client_auth=True
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    await server.start()
    try:
        good = grpc.ssl_channel_credentials(root, client_key, client_cert)
        async with grpc.aio.secure_channel(f"localhost:{port}", good) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert seen == ["alice"]  # the certificate's name is the caller's principal

        bad = grpc.ssl_channel_credentials(root, stranger_key, stranger_cert)
        async with grpc.aio.secure_channel(f"localhost:{port}", bad) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10
                )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert seen == ["alice"]
    finally:
        await server.stop(0)
