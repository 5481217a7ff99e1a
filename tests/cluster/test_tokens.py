"""Bearer tokens instead of certificates, with real daemons over real TLS: `agora tls token`
makes them, a master and an agent given --tokens take them (and ask for no client certificate),
the token's principal is the caller's for the ACLs, and a missing, unknown or exposed token is
refused in one line, logged and counted."""

from __future__ import annotations

import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from e2e_framework import Recorder, running
from harness import Daemon, agora, eventually_async

from agora.common.credentials import Credentials, CredentialsError, aio_channel
from agora.frameworks.sdk import TaskSpec

pytestmark = pytest.mark.e2e

ACLS = """
register_agents: [{principals: [agent-1]}]
register_frameworks: [{principals: [fw], roles: [ANY]}]
run_tasks: [{principals: [fw], users: [ANY]}]
read_state: [{principals: [ops, fw]}]
read_metrics: [{principals: [ops]}]
"""


def token(root: Path, name: str) -> str:
    made = agora("tls", "token", "--name", name, "--out", str(root / f"{name}.tok"))
    assert made.returncode == 0, made.stderr
    line = made.stdout.splitlines()[-1].strip()
    assert line.startswith(f"{name}: sha256:") and len(line) == len(name) + 2 + 7 + 64
    assert (root / f"{name}.tok").stat().st_mode & 0o777 == 0o600
    token_text = (root / f"{name}.tok").read_text().strip()
    assert token_text not in made.stdout  # the token itself is never printed
    return line


@pytest.fixture
def cluster(tmp_path):
    certs = tmp_path / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    for name, kind in (("master", "master"), ("agent-1", "agent")):
        assert (
            agora("tls", "issue", "--ca", str(certs), "--name", name, "--for", kind).returncode == 0
        )
    lines = [token(tmp_path, name) for name in ("agent-1", "fw", "ops", "eve")]
    (tmp_path / "tokens.yaml").write_text("\n".join(lines) + "\n")
    (tmp_path / "acls.yaml").write_text(ACLS)

    def tls(name: str) -> list[str]:
        return [
            "--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / f"{name}.pem"),
            "--tls-key", str(certs / f"{name}-key.pem"), "--tokens", str(tmp_path / "tokens.yaml"),
        ]  # fmt: skip

    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m"), "--metrics-port", "0"]
        + ["--acls", str(tmp_path / "acls.yaml"), *tls("master")],
        tmp_path / "master.log",
    ).start()
    # The agent serves with its certificate and says who it is with its token.
    agent = Daemon(
        ["agent", "--master", master.address, "--port", "0", "--work-dir", str(tmp_path / "a")]
        + ["--resources", "cpus:2;mem:1024;disk:1024", *tls("agent-1")]
        + ["--token-file", str(tmp_path / "agent-1.tok")],
        tmp_path / "agent.log",
    ).start()
    yield master, agent, certs, tmp_path
    agent.stop()
    master.stop()


def cli(master: Daemon, certs: Path, root: Path, token_name: str, *args: str):
    return agora(
        *args, "--master", master.address, "--tls-ca", str(certs / "ca.pem"),
        "--token-file", str(root / f"{token_name}.tok"),
    )  # fmt: skip


async def test_tokens_stand_for_principals_and_bad_ones_are_refused_and_counted(cluster):
    master, agent, certs, root = cluster
    # A person with a token (and the CA, to check the master): read_state allows ops.
    listed = cli(master, certs, root, "ops", "cluster", "agents", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "agent-1" in listed.stdout or '"hostname"' in listed.stdout
    # eve's token is known, but no rule names eve: refused by name, before anything is read.
    denied = cli(master, certs, root, "eve", "cluster", "agents")
    assert denied.returncode != 0 and "eve is named by no rule" in denied.stderr
    # An unknown token: UNAUTHENTICATED, in one line.
    (root / "stray.tok").write_text("not-a-token-anyone-knows\n")
    os.chmod(root / "stray.tok", 0o600)
    stray = cli(master, certs, root, "stray", "cluster", "agents")
    assert stray.returncode != 0 and "not one this server knows" in stray.stderr
    assert "Traceback" not in stray.stderr and len(stray.stderr.strip().splitlines()) == 1
    # A token file others can read is refused before it is used.
    os.chmod(root / "ops.tok", 0o644)
    exposed = cli(master, certs, root, "ops", "cluster", "agents")
    assert exposed.returncode != 0 and "chmod 600" in exposed.stderr
    os.chmod(root / "ops.tok", 0o600)

    # A framework on the SDK with a token and the CA only (no certificate) runs a task.
    fw = Credentials.load(certs / "ca.pem", None, None, token_file=root / "fw.tok")
    framework = Recorder()
    async with running(framework, master.address, name="tokened", credentials=fw):
        await framework.launch(TaskSpec(name="t", task_id="t1", cpus=0.1, mem=16, command="true"))
        await framework.wait_state("t1", "TASK_FINISHED")

    # The refusals were logged and counted by the master.
    await eventually_async(
        lambda: "authentication failed" in Path(master.log_path).read_text(),
        timeout=5,
        message="the master's log of the refusal",
    )
    metrics_url = next(
        line.split("metrics on ", 1)[1].strip() for line in master.lines if "metrics on" in line
    )
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    # /metrics is read_metrics': refused to an anonymous scraper, read with ops' bearer token
    # (as Prometheus' authorization: credentials_file sends it).
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(metrics_url, context=context, timeout=10)
    assert refused.value.code == 403
    assert "an anonymous caller may not read metrics" in refused.value.read().decode()
    bearer = {"Authorization": f"Bearer {(root / 'ops.tok').read_text().strip()}"}
    request = urllib.request.Request(metrics_url, headers=bearer)
    text = urllib.request.urlopen(request, context=context, timeout=10).read().decode()
    # The stray command made two calls (finding the leader, listing agents): both refused.
    counted = re.search(
        r'agora_master_authentication_failures_total\{reason="unknown_token"\} (\S+)', text
    )
    assert counted and float(counted.group(1)) >= 1, text[-2000:]


async def test_a_token_never_travels_in_plaintext_off_this_machine(tmp_path):
    path = tmp_path / "t.tok"
    path.write_text("abc\n")
    os.chmod(path, 0o600)
    credentials = Credentials.load(None, None, None, token_file=path)
    await aio_channel("127.0.0.1:5050", credentials).close()  # loopback: allowed
    with pytest.raises(CredentialsError, match="would travel in plaintext to 10.1.2.3:5050"):
        aio_channel("10.1.2.3:5050", credentials)


def test_a_tokens_file_holding_a_token_rather_than_its_digest_is_refused(tmp_path):
    bad = tmp_path / "tokens.yaml"
    bad.write_text("ops: my-secret-token\n")
    result = agora("master", "--port", "0", "--tokens", str(bad))
    assert result.returncode == 2
    assert "never the token itself" in result.stderr and "Traceback" not in result.stderr
