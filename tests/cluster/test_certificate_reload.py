"""Issue 37: certificates rotate without a restart. SIGHUP makes a daemon re-read --tls-cert and
--tls-key as it re-reads --acls: new handshakes get the new certificate; a bad replacement is
refused, said in the log, and the one in use stays."""

from __future__ import annotations

import signal
import socket
import ssl
from pathlib import Path

from cryptography import x509
from harness import Daemon, agora, eventually


def served_certificate(port: int, certs: Path) -> x509.Certificate:
    """The certificate the master presents to a new connection (as the client `ops`)."""
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    context.load_cert_chain(certs / "ops.pem", certs / "ops-key.pem")
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def issue(certs: Path, name: str, kind: str, *extra: str) -> None:
    made = agora("tls", "issue", "--ca", str(certs), "--name", name, "--for", kind, *extra)
    assert made.returncode == 0, made.stderr


def test_sighup_puts_a_replaced_certificate_in_use_and_refuses_a_bad_one(tmp_path):
    certs, other = tmp_path / "certs", tmp_path / "other-ca"
    for ca in (certs, other):
        assert agora("tls", "init", str(ca)).returncode == 0
    issue(certs, "master", "master")
    issue(certs, "ops", "client")
    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m")]
        + ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "master.pem")]
        + ["--tls-key", str(certs / "master-key.pem")],
        tmp_path / "master.log",
    ).start()
    try:
        assert master.proc is not None
        first = served_certificate(master.port, certs)
        issue(certs, "master", "master", "--force", "--days", "90")
        replaced = x509.load_pem_x509_certificate((certs / "master.pem").read_bytes())
        assert replaced.serial_number != first.serial_number
        master.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: "certificate reloaded" in master.log_path.read_text(),
            timeout=10,
            message="the reload said",
        )
        assert served_certificate(master.port, certs).serial_number == replaced.serial_number
        # A client command works on the new certificate as on the old.
        listed = agora(
            "cluster", "agents", "--master", f"localhost:{master.port}",
            "--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "ops.pem"),
            "--tls-key", str(certs / "ops-key.pem"),
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr

        # A pair from another CA put in its place: refused, the one in use stays.
        issue(other, "master", "master")
        for suffix in (".pem", "-key.pem"):
            (certs / f"master{suffix}").write_bytes((other / f"master{suffix}").read_bytes())
        master.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: "certificate not reloaded" in master.log_path.read_text(),
            timeout=10,
            message="the refusal said",
        )
        assert "is not signed by the CA" in master.log_path.read_text()
        assert served_certificate(master.port, certs).serial_number == replaced.serial_number
    finally:
        master.stop()
