"""The master and two agents on three "hosts": network namespaces joined by a bridge.

Nothing here can take a loopback shortcut: each daemon binds its own host's address and the
agents reach the master, and the framework reaches the agents' task output, across the bridge,
all over mutual TLS with certificates made by `agora tls` (plaintext is refused off loopback).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually
from netns import Hosts, netns_unavailable_reason

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

_reason = netns_unavailable_reason()


def tls(certs, name: str, kind: str, *hosts: str) -> list[str]:
    """`agora tls issue` for NAME; the --tls-* flags that present it."""
    argv = ["tls", "issue", "--ca", str(certs), "--name", name, "--for", kind]
    for host in hosts:
        argv += ["--host", host]
    made = subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *argv], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    return ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / f"{name}.pem")] + [
        "--tls-key",
        str(certs / f"{name}-key.pem"),
    ]


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_master_and_agents_on_separate_hosts(tmp_path):
    certs = tmp_path / "certs"
    made = subprocess.run(
        [sys.executable, "-m", "agora.cli.main", "tls", "init", str(certs)], capture_output=True
    )
    assert made.returncode == 0
    with Hosts(["master", "a1", "a2"]) as hosts:
        master_ip = hosts.address["master"]
        daemons: list[Daemon] = []
        master = None
        try:
            # Off loopback without TLS, the master refuses to start, saying what to do.
            plain = subprocess.run(
                [*hosts.exec_prefix("master"), sys.executable, "-m", "agora.cli.main"]
                + ["master", "--host", master_ip, "--port", "5050"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert plain.returncode == 2 and "without TLS" in plain.stderr
            assert "--insecure" in plain.stderr
            master = Daemon(
                [
                    "master",
                    "--host",
                    master_ip,
                    "--port",
                    "5050",
                    "--state-dir",
                    str(tmp_path / "master"),
                    "--heartbeat-interval",
                    "0.2",
                    *tls(certs, "master", "master", master_ip),
                ],
                tmp_path / "master.log",
                prefix=hosts.exec_prefix("master"),
            ).start()
            daemons.append(master)
            for host in ("a1", "a2"):
                ip = hosts.address[host]
                daemons.append(
                    Daemon(
                        [
                            "agent",
                            "--master",
                            f"{master_ip}:5050",
                            "--host",
                            ip,
                            "--port",
                            "5051",
                            "--advertise-ip",
                            ip,
                            "--hostname",
                            host,
                            "--resources",
                            "cpus:2;mem:1024;disk:1024;ports:[31000-31999]",
                            "--work-dir",
                            str(tmp_path / host),
                            *tls(certs, host, "agent", ip),
                        ],
                        tmp_path / f"{host}.log",
                        prefix=hosts.exec_prefix(host),
                    ).start()
                )

            client = tls(certs, "alice", "client")
            client_env = {
                **os.environ,
                "AGORA_TLS_CA": client[1],
                "AGORA_TLS_CERT": client[3],
                "AGORA_TLS_KEY": client[5],
            }

            def in_master_host(
                *cmd: str, timeout: float = 60, env=None
            ) -> subprocess.CompletedProcess:
                return subprocess.run(
                    [*hosts.exec_prefix("master"), *cmd],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env=env or client_env,
                )

            def agents():
                result = in_master_host(
                    sys.executable,
                    "-m",
                    "agora.cli.main",
                    "cluster",
                    "agents",
                    "--json",
                    "--master",
                    f"{master_ip}:5050",
                )
                assert result.returncode == 0, result.stderr
                return json.loads(result.stdout)

            registered = eventually(
                lambda: (a := agents()) and len(a) == 2 and a,
                timeout=30,
                message="both agents registered across the bridge",
            )
            addresses = sorted(a["address"].rsplit(":", 1)[0] for a in registered)
            assert addresses == sorted([hosts.address["a1"], hosts.address["a2"]])
            assert sorted(a["hostname"] for a in registered) == ["a1", "a2"]

            # A client without a certificate does not get past the TLS handshake.
            anonymous = in_master_host(
                sys.executable, "-m", "agora.cli.main", "cluster", "agents",
                "--master", f"{master_ip}:5050", "--timeout", "3",
                env={k: v for k, v in os.environ.items() if not k.startswith("AGORA_TLS")},
            )  # fmt: skip
            assert anonymous.returncode == 1 and "speaks TLS: give --tls-ca" in anonymous.stderr

            hello = in_master_host(
                sys.executable,
                "examples/hello_framework.py",
                "--master",
                f"{master_ip}:5050",
                "--tasks",
                "6",
                "--per-agent",
                "1",
                timeout=90,
            )
            logs = "\n".join(d.log_tail() for d in daemons)
            assert hello.returncode == 0, hello.stdout + hello.stderr + logs
            finished = [line for line in hello.stdout.splitlines() if " FINISHED on " in line]
            used = {line.split(" on ")[1].split(":")[0] for line in finished}
            ids = {a["agent_id"] for a in registered}
            assert used == ids, "tasks ran on both hosts"
        finally:
            for d in reversed(daemons):
                d.stop(sig=signal.SIGUSR1 if d is not master else signal.SIGTERM)
