"""A master that falls behind removes no live agent (issue 14's congestion collapse).

The master process is stopped (SIGSTOP) for several agent timeouts while a fleet of emulated
agents in another process keeps heartbeating: their heartbeats wait in the kernel's buffers, as
they wait in the master's queues when it is overloaded. When it runs again, silence is judged
on the time the master kept up (master/attention.py), so no live agent is removed, while an
agent that was killed before the stall is still removed within its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from harness import ROOT, Daemon, agora, eventually

AGENT_TIMEOUT = 1.5


def start_fleet(master: str, agents: int, prefix: str, log) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agora.experiments.emulated", "--master", master,
         "--agents", str(agents), "--hostname-prefix", prefix, "--stats-interval", "0"],
        stdout=subprocess.PIPE, stderr=log, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    if first and json.loads(first)["event"] == "ready":
        return proc
    proc.kill()
    proc.wait()
    proc.stdout.close()
    raise AssertionError(f"fleet {prefix} did not get ready: {first!r}")


def agents_of(master: str) -> dict[str, str]:
    out = agora("cluster", "agents", "--master", master, "--json")
    assert out.returncode == 0, out.stderr
    return {a["hostname"]: a["state"] for a in json.loads(out.stdout)}


def test_a_stalled_master_removes_no_live_agent_and_still_removes_a_dead_one(tmp_path):
    master = Daemon(
        ["master", "--port", "0", "--heartbeat-interval", "0.25",
         "--agent-timeout", str(AGENT_TIMEOUT), "--log-level", "info"],
        tmp_path / "master.log",
    ).start()  # fmt: skip
    fleets = []
    with open(tmp_path / "fleets.log", "ab") as log:
        try:
            fleets.append(start_fleet(master.address, 40, "live", log))
            fleets.append(start_fleet(master.address, 1, "doomed", log))
            eventually(lambda: len(agents_of(master.address)) == 41, message="41 agents")
            fleets[1].kill()  # really gone: nothing will speak for it again
            fleets[1].wait()
            assert master.proc is not None
            os.kill(master.proc.pid, signal.SIGSTOP)
            time.sleep(4 * AGENT_TIMEOUT)  # the live fleet keeps heartbeating meanwhile
            os.kill(master.proc.pid, signal.SIGCONT)
            eventually(
                lambda: "doomed-0" not in agents_of(master.address), message="the dead agent gone"
            )
            time.sleep(2 * AGENT_TIMEOUT)  # time for any wrong removal to happen
            live = agents_of(master.address)
            assert sorted(live) == sorted(f"live-{i}" for i in range(40))
            removals = [
                line
                for line in master.log_path.read_text().splitlines()
                if "removing agent" in line
            ]
            assert len(removals) == 1, removals
        finally:
            for fleet in fleets:
                fleet.kill()
                fleet.wait()
                if fleet.stdout is not None:
                    fleet.stdout.close()
            master.stop()
