"""Issue 37: the batch and services APIs obey ACLs of their own (submit_jobs, manage_apps in
`agora batch --acls`, `agora services --acls`), re-read on SIGHUP, and `--user` sets the Unix
user their tasks run as. Real daemons over mutual TLS, certificates from `agora tls`."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from harness import Daemon, agora, eventually, tls_flags

pytestmark = pytest.mark.e2e

MASTER_ACLS = """
register_agents: [{principals: [agent-1]}]
register_frameworks: [{principals: [batch], roles: ["*"], names: [batch]},
                      {principals: [services], roles: ["*"], names: [services]}]
run_tasks: [{principals: [batch, services], users: [nobody]}]
read_state: [{principals: [ANY]}]
"""

FRAMEWORK_ACLS = """
submit_jobs: [{principals: [alice], roles: ["*"]}]
manage_apps: [{principals: [alice], roles: ["*"]}]
"""


def as_client(certs: Path, name: str, master: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_TLS")}
    return {
        **env,
        "AGORA_MASTER": master,
        "AGORA_TLS_CA": str(certs / "ca.pem"),
        "AGORA_TLS_CERT": str(certs / f"{name}.pem"),
        "AGORA_TLS_KEY": str(certs / f"{name}-key.pem"),
    }


def test_framework_daemons_obey_their_acls_and_run_tasks_as_their_user(tmp_path):
    certs = tmp_path / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    for name, kind in [
        ("master", "master"),
        ("agent-1", "agent"),
        ("batch", "framework"),
        ("services", "framework"),
        ("alice", "client"),
        ("eve", "client"),
    ]:
        made = agora("tls", "issue", "--ca", str(certs), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    (tmp_path / "master-acls.yaml").write_text(MASTER_ACLS)
    framework_acls = tmp_path / "framework-acls.yaml"
    framework_acls.write_text(FRAMEWORK_ACLS)
    daemons: list[Daemon] = []
    try:
        master = Daemon(
            ["master", "--port", "0", "--state-dir", str(tmp_path / "m")]
            + ["--acls", str(tmp_path / "master-acls.yaml"), *tls_flags(certs, "master")],
            tmp_path / "master.log",
        ).start()
        daemons.append(master)
        address = f"localhost:{master.port}"  # the name the master's certificate carries
        daemons.append(
            Daemon(
                ["agent", "--master", address, "--port", "0", "--work-dir", str(tmp_path / "a")]
                + ["--resources", "cpus:2;mem:1024;disk:1024", *tls_flags(certs, "agent-1")],
                tmp_path / "agent.log",
            ).start()
        )
        batch = Daemon(
            ["batch", "--master", address, "--state-dir", str(tmp_path / "b")]
            + ["--acls", str(framework_acls), "--user", "nobody", *tls_flags(certs, "batch")],
            tmp_path / "batch.log",
        ).start()
        daemons.append(batch)
        daemons.append(
            Daemon(
                ["services", "--master", address, "--state-dir", str(tmp_path / "s")]
                + [
                    "--acls",
                    str(framework_acls),
                    "--user",
                    "nobody",
                    *tls_flags(certs, "services"),
                ],
                tmp_path / "services.log",
            ).start()
        )
        alice, eve = as_client(certs, "alice", address), as_client(certs, "eve", address)

        # Tasks run as --user: nobody (which the master's run_tasks allows; root would not be).
        job = agora(
            "job", "submit", "--name", "who", "--cpus", "0.1", "--mem", "16",
            "--wait", "--json", "--", "id", "-un", env=alice,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr
        ended = json.loads(job.stdout)
        assert ended["state"] == "JOB_SUCCEEDED", ended
        job_id = ended["job_id"]
        logs = agora("job", "logs", job_id, "--instance", "0", env=alice)
        assert logs.stdout.strip() == "nobody", logs.stdout + logs.stderr

        refused = agora("job", "submit", "--cpus", "0.1", "--mem", "16", "--", "true", env=eve)
        assert refused.returncode == 1
        assert "eve may not submit jobs in role '*'" in refused.stderr, refused.stderr

        app = tmp_path / "app.yaml"
        app.write_text("id: web\ncmd: sleep 600\ninstances: 1\ncpus: 0.1\nmem: 16\n")
        put = agora("app", "put", str(app), env=eve)
        assert put.returncode == 1 and "eve may not manage apps in role '*'" in put.stderr

        # The file is re-read on SIGHUP: eve may now submit.
        framework_acls.write_text(FRAMEWORK_ACLS.replace("[alice]", "[alice, eve]", 1))
        assert batch.proc is not None
        batch.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: "ACLs reloaded" in batch.log_path.read_text(), timeout=10, message="reload"
        )
        again = agora("job", "submit", "--cpus", "0.1", "--mem", "16", "--", "true", env=eve)
        assert again.returncode == 0, again.stderr
    finally:
        for daemon in reversed(daemons):
            daemon.stop(sig=signal.SIGUSR1 if "agent" in daemon.args else signal.SIGTERM)
