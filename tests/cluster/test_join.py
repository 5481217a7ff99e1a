"""Joining a machine with a token (issue 32): `agora tls join-token` on the CA's side, `agora agent
--join FILE` on the new machine; no key is ever copied. Real TLS, a real master with ACLs that
only let the token's principal register, and real daemon processes."""

from __future__ import annotations

import json
import re
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from harness import Daemon, agora, eventually

pytestmark = pytest.mark.e2e

ACLS = """
permissive: true
register_agents: [{principals: [agent-1]}]
register_frameworks: [{principals: [batch], roles: ["*"]}]
"""


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    root = tmp_path_factory.mktemp("join")
    ca = root / "ca"
    assert agora("tls", "init", str(ca)).returncode == 0
    for name, kind in [("master", "master"), ("ops", "client")]:
        made = agora("tls", "issue", "--ca", str(ca), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    (root / "acls.yaml").write_text(ACLS)
    tls = ["--tls-ca", str(ca / "ca.pem"), "--tls-cert", str(ca / "master.pem")]
    tls += ["--tls-key", str(ca / "master-key.pem")]
    daemon = Daemon(
        ["master", "--port", "0", "--state-dir", str(root / "m"), *tls]
        + ["--acls", str(root / "acls.yaml"), "--join-ca", str(ca), "--join-port", "0"],
        root / "master.log",
    ).start()
    joins = eventually(
        lambda: next(
            (m for line in daemon.lines if (m := re.match(r"joins on (\S+)", line))), None
        ),
        message="the join port",
    )
    daemon.root, daemon.ca, daemon.join_address = root, ca, joins.group(1)
    yield daemon
    daemon.stop()


def ops(master, *args: str):
    ca = master.ca
    return agora(
        *args,
        *("--master", master.address, "--tls-ca", str(ca / "ca.pem")),
        *("--tls-cert", str(ca / "ops.pem"), "--tls-key", str(ca / "ops-key.pem")),
    )


def token(master, name: str, kind: str = "agent", ttl: str = "10m") -> Path:
    path = master.root / f"{name}-{time.monotonic_ns()}.token"
    made = agora(
        "tls", "join-token", "--ca", str(master.ca), "--name", name, "--for", kind,
        "--ttl", ttl, "--out", str(path),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert f"wrote a join token for {kind} {name} to {path} (mode 0600)" in made.stdout
    return path


def agent(master, work: str, token_file: Path) -> Daemon:
    return Daemon(
        ["agent", "--master", master.address, "--port", "0", "--work-dir",
         str(master.root / work), "--join", str(token_file),
         "--join-address", master.join_address, "--resources", "cpus:1;mem:256"],
        master.root / f"{work}.log",
    )  # fmt: skip


def test_an_agent_joins_with_a_token_and_registers_as_the_tokens_principal(master):
    secret = token(master, "agent-1")
    text = secret.read_text().strip()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    one = agent(master, "w1", secret).start()
    try:

        def listed():
            agents = json.loads(ops(master, "cluster", "agents", "--json").stdout or "[]")
            return agents if agents and agents[0]["state"] == "ACTIVE" else None

        # Registered: the ACLs let only agent-1 register, so its certificate names agent-1.
        eventually(listed, message="the joined agent registered")
        tls = master.root / "w1" / "tls"
        assert stat.S_IMODE((tls / "key.pem").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((tls / "cert.pem").read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "agent-1"
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
        # The token's secret never reaches a log, and its file is gone once it is spent.
        secret_part = text.rsplit(".", 1)[1]
        for log in (master.log_path, one.log_path):
            assert secret_part not in log.read_text()
        assert not secret.exists()
        # Once only: a second machine with a copy of the same token is refused, saying what
        # to do.
        copy = master.root / "copied.token"
        copy.write_text(text + "\n")
        two = agora(
            "agent", "--master", master.address, "--work-dir", str(master.root / "w2"),
            "--join", str(copy), "--join-address", master.join_address,
        )  # fmt: skip
        assert two.returncode == 1
        assert "this join token was used already" in two.stderr
        assert not (master.root / "w2" / "tls" / "key.pem").exists()
        # A restart uses the files the join wrote: the token is no longer needed.
        one.stop()
        one = agent(master, "w1", secret).start()
        eventually(listed, message="the agent back with its own certificate")
    finally:
        one.stop()


def test_an_expired_token_or_one_of_another_ca_is_refused(master, tmp_path):
    late = token(master, "agent-1", ttl="1s")
    time.sleep(1.5)
    refused = agora(
        "agent", "--master", master.address, "--work-dir", str(tmp_path / "late"),
        "--join", str(late), "--join-address", master.join_address,
    )  # fmt: skip
    assert refused.returncode == 1 and "the join token has expired" in refused.stderr
    other = tmp_path / "other-ca"
    assert agora("tls", "init", str(other)).returncode == 0
    foreign = tmp_path / "foreign.token"
    made = agora(
        "tls", "join-token", "--ca", str(other), "--name", "agent-1", "--for", "agent",
        "--out", str(foreign),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    refused = agora(
        "agent", "--master", master.address, "--work-dir", str(tmp_path / "foreign"),
        "--join", str(foreign), "--join-address", master.join_address,
    )  # fmt: skip
    # The token's CA does not vouch for this master: the joiner stops before sending anything.
    assert refused.returncode == 1 and "cannot join through" in refused.stderr


def test_a_framework_daemon_joins_the_same_way(master):
    secret = token(master, "batch", kind="framework")
    batch = Daemon(
        ["batch", "--master", master.address, "--port", "0", "--state-dir",
         str(master.root / "batch"), "--join", str(secret),
         "--join-address", master.join_address],
        master.root / "batch.log",
    ).start()  # fmt: skip
    try:

        def subscribed():
            frameworks = json.loads(ops(master, "cluster", "frameworks", "--json").stdout or "[]")
            return [f for f in frameworks if f["name"] == "batch" and f["connected"]]

        eventually(subscribed, message="the joined batch framework subscribed")
        assert (master.root / "batch" / "tls" / "cert.pem").exists()
    finally:
        batch.stop()


def test_a_joined_agent_renews_its_certificate_before_it_expires_without_a_restart(tmp_path):
    import socket
    import ssl

    ca = tmp_path / "ca"
    assert agora("tls", "init", str(ca)).returncode == 0
    for name, kind in [("master", "master"), ("ops", "client")]:
        made = agora("tls", "issue", "--ca", str(ca), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    tls = ["--tls-ca", str(ca / "ca.pem"), "--tls-cert", str(ca / "master.pem")]
    tls += ["--tls-key", str(ca / "master-key.pem")]
    # Joined certificates live 8.6 s here (--join-cert-days 0.0001): renewed at two thirds.
    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m"), *tls, "--join-ca",
         str(ca), "--join-port", "0", "--join-cert-days", "0.0001"],
        tmp_path / "master.log",
    ).start()  # fmt: skip
    one = batch = None
    try:
        lines = master.lines
        address = eventually(
            lambda: next((m.group(1) for x in lines if (m := re.match(r"joins on (\S+)", x))), None)
        )
        master.root, master.ca, master.join_address = tmp_path, ca, address
        one = agent(master, "w1", token(master, "agent-1")).start()
        batch = Daemon(
            ["batch", "--master", master.address, "--port", "0", "--state-dir",
             str(tmp_path / "batch"), "--join", str(token(master, "batch", kind="framework")),
             "--join-address", address],
            tmp_path / "batch.log",
        ).start()  # fmt: skip
        daemons = {one: tmp_path / "w1" / "tls", batch: tmp_path / "batch" / "tls"}
        firsts = {d: x509.load_pem_x509_certificate((t / "cert.pem").read_bytes())
                  for d, t in daemons.items()}  # fmt: skip
        for daemon, tls_dir in daemons.items():

            def renewed(daemon=daemon, tls_dir=tls_dir):
                cert = x509.load_pem_x509_certificate((tls_dir / "cert.pem").read_bytes())
                return cert if cert.serial_number != firsts[daemon].serial_number else None

            second = eventually(renewed, timeout=30, message="the certificate renewed")
            assert second.not_valid_after_utc > firsts[daemon].not_valid_after_utc
            # Logged just after the new files are in place: read once it is written.
            eventually(
                lambda daemon=daemon: "certificate renewed" in daemon.log_path.read_text(),
                timeout=10,
                message="the renewal logged",
            )
        # Past the first certificates' expiry, each daemon's server presents its renewed one:
        # a client that checks dates gets through (an expired one fails the handshake).
        last = max(c.not_valid_after_utc.timestamp() for c in firsts.values())
        time.sleep(max(0.0, last - time.time() + 0.5))
        context = ssl.create_default_context(cafile=str(ca / "ca.pem"))
        context.load_cert_chain(ca / "ops.pem", ca / "ops-key.pem")
        for daemon in daemons:
            host, port = daemon.address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname=host) as tls_socket:
                    der = tls_socket.getpeercert(binary_form=True)
            served = x509.load_der_x509_certificate(der)
            assert served.serial_number != firsts[daemon].serial_number
            assert served.not_valid_after_utc.timestamp() > time.time()
            assert daemon.alive()  # no restart in between
        # And the master still has them: the agent registered, the framework subscribed.
        agents = json.loads(ops(master, "cluster", "agents", "--json").stdout)
        assert [a["state"] for a in agents] == ["ACTIVE"]
        frameworks = json.loads(ops(master, "cluster", "frameworks", "--json").stdout)
        assert [f["connected"] for f in frameworks if f["name"] == "batch"] == [True]
    finally:
        for daemon in (one, batch):
            if daemon is not None:
                daemon.stop()
        master.stop()


def test_only_a_joined_machine_renews_a_certificate(master):
    import grpc

    from agora.common.certificates import new_key, signing_request
    from agora.v1 import join_pb2, join_pb2_grpc

    ca = master.ca
    credentials = grpc.ssl_channel_credentials(
        (ca / "ca.pem").read_bytes(), (ca / "ops-key.pem").read_bytes(),
        (ca / "ops.pem").read_bytes(),
    )  # fmt: skip
    request = join_pb2.RenewRequest(csr=signing_request(new_key(), "ops"))
    # A person's certificate from `agora tls issue` expires when it says: no renewal.
    with grpc.secure_channel(master.address, credentials) as channel:
        try:
            join_pb2_grpc.JoinStub(channel).Renew(request, timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "only a machine that joined with a token renews" in e.details()
        else:
            raise AssertionError("the ops certificate was renewed")
    # On the join port, which asks for no certificate, a renewal proves the certificate it
    # renews with its key's signature: without one, or with another key's, it is refused.
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ops_key = serialization.load_pem_private_key((ca / "ops-key.pem").read_bytes(), None)
    signed = ops_key.sign(request.csr, ec.ECDSA(hashes.SHA256()))
    stranger = new_key().sign(request.csr, ec.ECDSA(hashes.SHA256()))
    ops_pem = (ca / "ops.pem").read_bytes()
    anonymous = grpc.ssl_channel_credentials((ca / "ca.pem").read_bytes())
    cases = [
        (join_pb2.RenewRequest(csr=request.csr), grpc.StatusCode.PERMISSION_DENIED, "renew"),
        (
            join_pb2.RenewRequest(csr=request.csr, certificate=ops_pem, signature=stranger),
            grpc.StatusCode.PERMISSION_DENIED,
            "not that certificate's key's",
        ),
        (  # proven, but a person's certificate: it expires when it says
            join_pb2.RenewRequest(csr=request.csr, certificate=ops_pem, signature=signed),
            grpc.StatusCode.INVALID_ARGUMENT,
            "only a machine that joined with a token renews",
        ),
    ]
    with grpc.secure_channel(master.join_address, anonymous) as channel:
        for asked, code, words in cases:
            try:
                join_pb2_grpc.JoinStub(channel).Renew(asked, timeout=10)
            except grpc.RpcError as e:
                assert e.code() == code and words in e.details(), e.details()
            else:
                raise AssertionError(f"renewed on the join port: {words}")
