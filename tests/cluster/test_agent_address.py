"""Addresses that cannot be wrong silently (issue 32): an agent advertises the address it reaches
the master from, a master refuses an agent on another host that advertises loopback (saying
which flag to pass), and a master bound to loopback says so at start.

The two hosts are network namespaces joined by a bridge (netns.py), so the agent really is on
another "machine": nothing it advertises on loopback reaches the master's side.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually
from netns import Hosts, netns_unavailable_reason

pytestmark = [pytest.mark.e2e]

_reason = netns_unavailable_reason()


def _agent(master: str, work_dir, *extra: str) -> list[str]:
    return [
        "agent",
        "--master",
        master,
        "--port",
        "0",
        "--insecure",
        "--isolation",
        "none",
        "--resources",
        "cpus:1;mem:256;disk:256;ports:[31000-31010]",
        "--work-dir",
        str(work_dir),
        *extra,
    ]


@pytest.mark.netns
@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_an_agent_advertises_where_it_reaches_the_master_and_loopback_is_refused(tmp_path):
    with Hosts(["m", "a"]) as hosts:
        master_ip, agent_ip = hosts.address["m"], hosts.address["a"]
        master_at = f"{master_ip}:5050"
        daemons: list[Daemon] = []
        try:
            master = Daemon(
                ["master", "--host", master_ip, "--port", "5050", "--insecure"]
                + ["--state-dir", str(tmp_path / "master"), "--heartbeat-interval", "0.2"],
                tmp_path / "master.log",
                prefix=hosts.exec_prefix("m"),
            ).start()
            daemons.append(master)

            # No --host: the agent listens on, and advertises, the address it reaches the
            # master from (the far end of its veth), not 127.0.0.1.
            good = Daemon(
                _agent(master_at, tmp_path / "good"),
                tmp_path / "good.log",
                prefix=hosts.exec_prefix("a"),
            ).start()
            daemons.append(good)
            assert good.address == f"{agent_ip}:{good.port}"

            def agents():
                result = subprocess.run(
                    [*hosts.exec_prefix("m"), sys.executable, "-m", "agora.cli.main"]
                    + ["cluster", "agents", "--json", "--master", master_at],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert result.returncode == 0, result.stderr
                return json.loads(result.stdout)

            registered = eventually(agents, timeout=30, message="the agent registered")
            assert [a["address"] for a in registered] == [f"{agent_ip}:{good.port}"]

            # --host 0.0.0.0: listening everywhere, it advertises the same detected address.
            wide = Daemon(
                _agent(master_at, tmp_path / "wide", "--host", "0.0.0.0"),
                tmp_path / "wide.log",
                prefix=hosts.exec_prefix("a"),
            ).start()
            daemons.append(wide)
            both = eventually(
                lambda: len(a := agents()) == 2 and a, timeout=30, message="two agents"
            )
            assert sorted(a["address"] for a in both) == sorted(
                [f"{agent_ip}:{good.port}", f"{agent_ip}:{wide.port}"]
            )

            # --host 127.0.0.1 on another host: refused, and the agent's log says what to pass,
            # once at warning however often it retries (debug shows the retries).
            bad = Daemon(
                _agent(master_at, tmp_path / "bad", "--host", "127.0.0.1", "--log-level", "debug"),
                tmp_path / "bad.log",
                prefix=hosts.exec_prefix("a"),
            ).start()
            daemons.append(bad)

            def refusals() -> list[str]:
                text = (tmp_path / "bad.log").read_text()
                return [line for line in text.splitlines() if "advertises 127.0.0.1" in line]

            said = eventually(
                lambda: len(r := refusals()) >= 3 and r,
                timeout=30,
                message="the loopback agent refused three times",
            )
            warnings = [line for line in said if "[warning" in line]
            assert len(warnings) == 1, said
            assert f"--host {agent_ip}" in warnings[0] and "--advertise-ip" in warnings[0]
            assert "FAILED_PRECONDITION" in warnings[0] or "refused" in warnings[0]
            assert len(agents()) == 2  # still only the good ones
            master_log = (tmp_path / "master.log").read_text()
            refused = [line for line in master_log.splitlines() if "agent refused" in line]
            assert len(refused) == 1, refused  # the master says it once, too
        finally:
            for d in reversed(daemons):
                d.stop(sig=signal.SIGUSR1 if d is not daemons[0] else signal.SIGTERM)


def test_a_master_on_loopback_says_other_machines_cannot_reach_it(tmp_path):
    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "master")],
        tmp_path / "master.log",
    ).start()
    try:

        def warned() -> list[str]:
            text = (tmp_path / "master.log").read_text()
            return [line for line in text.splitlines() if "only: agents on other" in line]

        lines = eventually(warned, timeout=30, message="the loopback warning")
        assert len(lines) == 1 and "[warning" in lines[0]
        assert "listening on 127.0.0.1 only" in lines[0] and "--host ADDRESS" in lines[0]
    finally:
        master.stop()


@pytest.mark.netns
@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_a_relay_refuses_a_loopback_agent_from_another_host(tmp_path):
    """Behind a relay the master sees the relay's address, not the agent's: the relay, which
    sees the agent's, refuses it in the master's words."""
    with Hosts(["m", "a"]) as hosts:
        master_ip, agent_ip = hosts.address["m"], hosts.address["a"]
        daemons: list[Daemon] = []
        try:
            daemons.append(
                Daemon(
                    ["master", "--host", master_ip, "--port", "5050", "--insecure"]
                    + ["--state-dir", str(tmp_path / "master")],
                    tmp_path / "master.log",
                    prefix=hosts.exec_prefix("m"),
                ).start()
            )
            relay = Daemon(
                ["relay", "--master", f"{master_ip}:5050", "--host", master_ip]
                + ["--port", "5053", "--insecure"],
                tmp_path / "relay.log",
                prefix=hosts.exec_prefix("m"),
            ).start()
            daemons.append(relay)
            bad = Daemon(
                _agent(f"{master_ip}:5053", tmp_path / "bad", "--host", "127.0.0.1"),
                tmp_path / "bad.log",
                prefix=hosts.exec_prefix("a"),
            ).start()
            daemons.append(bad)

            def refused() -> list[str]:
                text = (tmp_path / "bad.log").read_text()
                return [line for line in text.splitlines() if "advertises 127.0.0.1" in line]

            line = eventually(refused, timeout=30, message="the relay's refusal")[0]
            assert f"this agent dials from {agent_ip}" in line and f"--host {agent_ip}" in line
        finally:
            for d in reversed(daemons):
                d.stop(sig=signal.SIGUSR1 if d is bad else signal.SIGTERM)
