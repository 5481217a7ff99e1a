"""A whole local cluster over mutual TLS: every client command and both frameworks work with
certificates made by `agora tls`, and callers without the cluster's certificates are refused."""

from __future__ import annotations

import datetime
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from harness import ROOT, Daemon, eventually

pytestmark = pytest.mark.e2e


def run(*argv: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def agora(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run("-m", "agora.cli.main", *args, env=env)


def issue(certs: Path, name: str, kind: str, ca: Path | None = None) -> dict[str, str]:
    ca = ca or certs
    made = agora(
        "tls", "issue", "--ca", str(ca), "--name", name, "--for", kind, "--out", str(certs)
    )
    assert made.returncode == 0, made.stderr
    return {
        "AGORA_TLS_CA": str(certs / "ca.pem"),
        "AGORA_TLS_CERT": str(certs / f"{name}.pem"),
        "AGORA_TLS_KEY": str(certs / f"{name}-key.pem"),
    }


def no_tls_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGORA_TLS")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    certs = root / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    daemon = issue(certs, "local", "master")
    flags = ["--tls-ca", daemon["AGORA_TLS_CA"], "--tls-cert", daemon["AGORA_TLS_CERT"]]
    flags += ["--tls-key", daemon["AGORA_TLS_KEY"]]
    local = Daemon(
        ["local", "--port", "0", "--agents", "2", "--work-dir", str(root / "w"), *flags],
        root / "local.log",
    ).start(timeout=60)
    eventually(
        lambda: any("services listening on" in line for line in local.lines),
        timeout=30,
        message="the frameworks to start",
    )
    client = {**no_tls_env(), **issue(certs, "alice", "client"), "AGORA_MASTER": local.address}
    yield local, certs, client
    local.stop()


def test_every_client_command_works_over_mutual_tls(cluster):
    local, _, env = cluster
    agents = json.loads(agora("cluster", "agents", "--json", env=env).stdout)
    assert len(agents) == 2
    state = agora("cluster", "state", env=env)
    assert state.returncode == 0 and "WARNING" not in state.stdout  # TLS: nothing to warn of
    job = agora(
        "job", "submit", "--name", "tls-job", "--instances", "2", "--cpus", "0.1",
        "--mem", "32", "--wait", "--", "sh", "-c", "echo over-tls", env=env,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr + local.log_tail()
    job_id = next(line for line in job.stdout.splitlines() if line.startswith("job-"))
    job_id = job_id.split()[0]
    logs = agora("job", "logs", job_id, "--instance", "0", env=env)  # through the agent, TLS
    assert logs.returncode == 0 and "over-tls" in logs.stdout, logs.stderr
    assert "tls-job" in agora("job", "list", env=env).stdout
    assert agora("app", "list", env=env).returncode == 0
    tasks = json.loads(agora("cluster", "tasks", "--json", env=env).stdout)
    assert sum(t["state"] == "TASK_FINISHED" for t in tasks) >= 2
    # A framework written with the SDK takes its credentials from the same variables.
    hello = run("examples/hello_framework.py", "--tasks", "4", env=env, timeout=90)
    assert hello.returncode == 0, hello.stdout + hello.stderr + local.log_tail()


def test_callers_without_the_clusters_certificate_are_refused(cluster, tmp_path):
    local, certs, env = cluster
    anonymous = {**no_tls_env(), "AGORA_MASTER": local.address}
    refused = agora("cluster", "agents", "--timeout", "3", env=anonymous)
    assert refused.returncode == 1 and "speaks TLS" in refused.stderr
    # A certificate from another CA: refused in the handshake, before any call.
    other = tmp_path / "other"
    assert agora("tls", "init", str(other)).returncode == 0
    stranger = {**no_tls_env(), **issue(other, "mallory", "client"), "AGORA_MASTER": local.address}
    stranger["AGORA_TLS_CA"] = env["AGORA_TLS_CA"]  # trusts the cluster, is not trusted by it
    refused = agora("cluster", "agents", "--timeout", "3", env=stranger)
    assert refused.returncode == 1, refused.stdout
    assert "is not signed by the CA in --tls-ca" in refused.stderr  # seen before dialling
    # Trusting both CAs, the stranger gets as far as the handshake, where the master refuses
    # its certificate: the message says so.
    both = tmp_path / "both-cas.pem"
    both.write_bytes((other / "ca.pem").read_bytes() + (certs / "ca.pem").read_bytes())
    refused = agora(
        "cluster", "agents", "--timeout", "3", env={**stranger, "AGORA_TLS_CA": str(both)}
    )
    assert refused.returncode == 1, refused.stdout
    assert "refused this caller's certificate in the TLS handshake" in refused.stderr
    # One that trusts only another CA is told the master's certificate is not its CA's.
    lost = {**stranger, "AGORA_TLS_CA": str(other / "ca.pem")}
    refused = agora("cluster", "agents", "--timeout", "3", env=lost)
    assert refused.returncode == 1 and "is not signed by the CA in --tls-ca" in refused.stderr
    assert "the certificate of" in refused.stderr
    # Files that cannot work are named before anything is dialled.
    expired = _expired_certificate(certs, tmp_path)
    bad = {**env, "AGORA_TLS_CERT": str(expired), "AGORA_TLS_KEY": str(tmp_path / "old-key.pem")}
    result = agora("cluster", "agents", env=bad)
    assert result.returncode == 1 and "expired on" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    mismatched = {**env, "AGORA_TLS_KEY": str(certs / "local-key.pem")}
    result = agora("cluster", "agents", env=mismatched)
    assert result.returncode == 1 and "is not the key of" in result.stderr


def test_a_daemon_with_a_bad_certificate_file_exits_2_in_one_line(cluster, tmp_path):
    _, certs, _ = cluster
    (tmp_path / "junk.pem").write_text("not a certificate")
    result = agora(
        "master", "--port", "0", "--tls-ca", str(certs / "ca.pem"),
        "--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(certs / "local-key.pem"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "--tls-cert" in result.stderr and "not a PEM certificate" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    half = agora("agent", "--master", "127.0.0.1:1", "--tls-ca", str(certs / "ca.pem"))
    assert half.returncode == 2 and "--tls-cert, --tls-key missing" in half.stderr


def _expired_certificate(certs: Path, tmp_path: Path) -> Path:
    """A client certificate of the cluster's CA that expired yesterday."""
    ca_cert = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((certs / "ca-key.pem").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=10))
        .not_valid_after(now - datetime.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "old-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path = tmp_path / "old.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_jobs_and_apps_belong_to_whoever_made_them(cluster, tmp_path):
    local, certs, alice = cluster
    bob = {**alice, **issue(certs, "bob", "client")}
    job = agora(
        "job", "submit", "--name", "alices-job", "--cpus", "0.1", "--mem", "16",
        "--env", "DB_PASSWORD=hunter2", "--json", "--", "sleep", "60", env=alice,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr
    job_id = json.loads(job.stdout)["job_id"]
    # Bob sees the job, but not its environment's values, and may not kill it.
    seen = agora("job", "status", job_id, "--json", env=bob)
    assert seen.returncode == 0, seen.stderr
    assert "hunter2" not in seen.stdout and "DB_PASSWORD" in seen.stdout
    assert "hunter2" in agora("job", "status", job_id, "--json", env=alice).stdout
    refused = agora("job", "kill", job_id, env=bob)
    assert refused.returncode != 0 and f"bob may not kill job {job_id}" in refused.stderr
    assert agora("job", "kill", job_id, env=alice).returncode == 0

    spec = tmp_path / "app.yaml"
    spec.write_text(
        "id: alices-app\ncmd: sleep 600\ninstances: 1\ncpus: 0.1\nmem: 16\nenv: {API_KEY: s3cret}\n"
    )
    assert agora("app", "put", str(spec), env=alice).returncode == 0
    shown = agora("app", "get", "alices-app", "--json", env=bob)
    assert shown.returncode == 0 and "s3cret" not in shown.stdout
    for args in (("app", "scale", "alices-app", "0"), ("app", "delete", "alices-app")):
        refused = agora(*args, env=bob)
        assert refused.returncode != 0 and "bob may not" in refused.stderr, refused.stderr
    taken = agora("app", "put", str(spec), env=bob)  # nor take it over by putting it again
    assert taken.returncode != 0 and "bob may not update app alices-app" in taken.stderr
    assert agora("app", "delete", "alices-app", env=alice).returncode == 0


def test_refused_tls_handshakes_are_logged_and_counted_by_the_master(tmp_path):
    certs = tmp_path / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    issue(certs, "master", "master")
    master = Daemon(
        ["master", "--port", "0", "--metrics-port", "0", "--state-dir", str(tmp_path / "m")]
        + ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "master.pem")]
        + ["--tls-key", str(certs / "master-key.pem")],
        tmp_path / "master.log",
    ).start()
    try:
        other = tmp_path / "other"
        assert agora("tls", "init", str(other)).returncode == 0
        stranger = {
            **no_tls_env(),
            **issue(other, "mallory", "client"),
            "AGORA_MASTER": master.address,
        }
        both = tmp_path / "both.pem"
        both.write_bytes((other / "ca.pem").read_bytes() + (certs / "ca.pem").read_bytes())
        stranger["AGORA_TLS_CA"] = str(both)
        for _ in range(2):  # a certificate of another CA, twice
            assert agora("cluster", "agents", "--timeout", "2", env=stranger).returncode == 1
        metrics = next(
            line.split("metrics on ", 1)[1] for line in master.lines if "metrics on" in line
        )

        def counted() -> dict[str, float]:
            context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
            text = urllib.request.urlopen(metrics, context=context, timeout=10).read().decode()
            return {
                m.group(1): float(m.group(2))
                for m in re.finditer(
                    r'agora_master_authentication_failures_total\{reason="(\w+)"\} (\S+)', text
                )
            }

        eventually(lambda: counted().get("unknown_ca", 0) >= 2, timeout=10, message="counted")
        log = master.log_path.read_text()
        assert "TLS handshake refused" in log and "unknown_ca" in log
        # gRPC's own INFO chatter does not reach the log; the master's lines still do.
        assert "Log level INFO is not suitable" not in log and "master started" in log
    finally:
        master.stop()


async def test_a_framework_posing_as_batch_is_never_sent_a_job(cluster, tmp_path):
    """issue 37: without a reservation in the ACLs, anyone with a certificate of the cluster may
    register a framework named `batch` and serve an API of its own. The CLI then refuses to
    guess which `batch` is real (the secret in --env would go to the impostor) and says how to
    reserve the name; once the impostor is gone, jobs go to the real daemon again."""
    from e2e_framework import Recorder, running

    from agora.common.credentials import Credentials, add_port
    from agora.common.rpc import new_server

    local, certs, env = cluster
    issue(certs, "mallory", "framework")
    mallory = Credentials.load(certs / "ca.pem", certs / "mallory.pem", certs / "mallory-key.pem")
    server = new_server()  # the impostor's "Batch API": it would log whatever it is sent
    port = add_port(server, "127.0.0.1:0", mallory)
    await server.start()
    try:
        async with running(
            Recorder(),
            master=local.address,
            name="batch",
            credentials=mallory,
            service_address=f"127.0.0.1:{port}",
        ) as impostor:
            submitted = agora(
                "job",
                "submit",
                "--name",
                "secret",
                "--env",
                "DB_PASSWORD=hunter2",
                "--",
                "true",
                env=env,
            )
            assert submitted.returncode == 1, submitted.stdout
            assert "registered by several principals (local, mallory)" in submitted.stderr
            assert "names:" in submitted.stderr
            torn = agora("cluster", "teardown", impostor.framework_ids[0], env=env)
            assert torn.returncode == 0, torn.stderr
    finally:
        await server.stop(0)
    listed = agora("job", "list", env=env)
    assert listed.returncode == 0, listed.stderr
