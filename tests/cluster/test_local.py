"""`agora local`, the README's first command: a whole cluster in one process, used as a user
would."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually

pytestmark = pytest.mark.e2e


def agora(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_local_cluster_runs_hello_and_a_batch_job(tmp_path):
    local = Daemon(
        ["local", "--port", "0", "--agents", "2", "--work-dir", str(tmp_path / "w")],
        tmp_path / "local.log",
    ).start(timeout=60)
    try:
        master = local.address
        eventually(
            lambda: any("services listening on" in line for line in local.lines),
            timeout=30,
            message="the frameworks to start",
        )
        agents = json.loads(agora("cluster", "agents", "--json", "--master", master).stdout)
        assert len(agents) == 2
        assert all(
            re.fullmatch(r"ports:\[\d+-\d+\]", a["resources"].split(";")[-1]) for a in agents
        )
        names = {
            f["name"]
            for f in json.loads(agora("cluster", "frameworks", "--json", "--master", master).stdout)
        }
        assert {"batch", "services"} <= names

        hello = subprocess.run(
            [sys.executable, "examples/hello_framework.py", "--master", master, "--tasks", "6"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert hello.returncode == 0, hello.stdout + hello.stderr + local.log_tail()
        assert "all 6 tasks finished" in hello.stdout

        job = agora(
            "job",
            "submit",
            "--master",
            master,
            "--name",
            "greet",
            "--instances",
            "3",
            "--cpus",
            "0.1",
            "--mem",
            "32",
            "--wait",
            "--",
            "echo",
            "hi",
        )
        assert job.returncode == 0, job.stdout + job.stderr + local.log_tail()

        # Output cut short by a closed pipe (`| head`) ends quietly: no traceback, exit 0 or
        # 141 (SIGPIPE), as any Unix command's.
        big = agora(
            "job", "submit", "--master", master, "--name", "big", "--wait", "--json",
            "--", "python3", "-c", "print('x' * 1000000)",
        )  # fmt: skip
        assert big.returncode == 0, big.stderr
        big_id = json.loads(big.stdout)["job_id"]
        piped = subprocess.run(
            [
                "bash", "-c",
                f"{sys.executable} -m agora.cli.main job logs {big_id} --master {master} "
                "| head -c 10; exit ${PIPESTATUS[0]}",
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert piped.stdout == "x" * 10
        assert piped.returncode in (0, 141) and "Traceback" not in piped.stderr, piped.stderr

        # A task killed by its memory limit says so in every view.
        hog = agora(
            "job", "submit", "--master", master, "--name", "hog", "--mem", "32", "--wait",
            "--json", "--", "python3", "-c", "b = bytearray(300 * 1024 * 1024); b[::4096] = "
            "b'1' * len(b[::4096])",
        )  # fmt: skip
        assert hog.returncode == 1, hog.stderr  # the job FAILED
        hog_id = json.loads(hog.stdout)["job_id"]
        status = agora("job", "status", hog_id, "--master", master)
        assert "memory limit of 32 MB exceeded" in status.stdout, status.stdout
        tasks = agora("cluster", "tasks", "--json", "--master", master)
        [row] = [t for t in json.loads(tasks.stdout) if t["task_id"].startswith(hog_id)]
        assert row["reason"] == "REASON_CONTAINER_LIMITATION_MEMORY"
        assert "memory limit of 32 MB exceeded" in row["message"]

        # Any framework's task output, found through the master: hello's tasks.
        tasks = json.loads(agora("cluster", "tasks", "--json", "--master", master).stdout)
        hello_3 = next(t["task_id"] for t in tasks if t["name"] == "hello-3")
        said = agora("task", "logs", hello_3, "--master", master)
        assert said.returncode == 0, said.stderr
        assert said.stdout == "hello from task 3\n"
        missing = agora("task", "logs", "no-such-task", "--master", master)
        assert missing.returncode == 1 and "knows no task 'no-such-task'" in missing.stderr

        # An app's instance: its stdout, its stderr, and following what it writes.
        app = tmp_path / "talker.yaml"
        app.write_text(
            "id: talker\ninstances: 1\ncpus: 0.1\nmem: 16\n"
            "cmd: echo to-stdout; echo to-stderr >&2; for i in 1 2 3; do echo tick $i; "
            "sleep 0.3; done; sleep 600\n"
        )
        assert agora("app", "put", str(app), "--master", master).returncode == 0
        eventually(
            lambda: "tick 3" in agora("app", "logs", "talker", "--master", master).stdout,
            timeout=30,
            message="the app's output",
        )
        err = agora("app", "logs", "talker", "--stderr", "--master", master)
        assert err.returncode == 0 and err.stdout == "to-stderr\n"
        wrong = agora("app", "logs", "talker", "--instance", "5", "--master", master)
        assert wrong.returncode == 1 and "instances 0-0, not 5" in wrong.stderr
        # --follow prints as the task writes; it ends when the task does (killed here).
        follower = subprocess.Popen(
            [sys.executable, "-m", "agora.cli.main", "app", "logs", "talker", "-f"]
            + ["--master", master],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert follower.stdout is not None
        first = follower.stdout.readline()  # it is following: now end the task under it
        assert agora("app", "delete", "talker", "--master", master).returncode == 0
        with follower.stdout, follower.stderr:
            out = follower.stdout.read()  # (not communicate(): readline buffered the rest)
            assert follower.wait(timeout=60) == 0, follower.stderr.read()
        assert (first + out).startswith("to-stdout\ntick 1\n")
    finally:
        local.stop()


def test_local_rejects_bad_flags_with_exit_2_and_a_taken_port_in_one_line(tmp_path):
    for flags, named in (
        (["--agents", "-1"], "--agents"),
        (["--port", "70000"], "--port"),
        (["--agent-resources", "cpus:x"], "--agent-resources"),
    ):
        out = agora("local", *flags, "--work-dir", str(tmp_path / "w"))
        assert out.returncode == 2 and named in out.stderr, (flags, out.stderr)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = agora(
            "local", "--port", str(port), "--agents", "0", "--work-dir", str(tmp_path / "w")
        )
    assert out.returncode == 1
    assert "cannot start the master" in out.stderr and "Traceback" not in out.stderr


def _free_run(n: int) -> int:
    """A port p with p .. p+n-1 and their +30 dashboard ports all free now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n + 30 > 65535:
            continue
        try:
            for port in [*range(base, base + n), *range(base + 30, base + 30 + n)]:
                with socket.socket() as t:
                    t.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no run of free ports")


def test_local_with_three_masters_fails_over_when_the_leader_is_killed(tmp_path):
    import os
    import signal

    base = _free_run(3)
    local = Daemon(
        ["local", "--masters", "3", "--port", str(base), "--agents", "1"]
        + ["--work-dir", str(tmp_path / "w")],
        tmp_path / "local.log",
    ).start(timeout=90)
    try:
        eventually(
            lambda: any("services listening on" in line for line in local.lines),
            timeout=60,
            message="the frameworks to start",
        )
        zk_url = next(line.split()[1] for line in local.lines if line.startswith("masters: zk://"))
        pids = {
            m.group(1): int(m.group(2))
            for line in local.lines
            if (m := re.match(r"master listening on (\S+) \(pid (\d+)\)", line))
        }
        assert len(pids) == 3

        def roster():
            out = agora("cluster", "masters", "--json", "--master", zk_url, "--timeout", "3")
            return json.loads(out.stdout) if out.returncode == 0 else []

        eventually(lambda: len(roster()) == 3, timeout=30, message="three masters standing")
        leader = roster()[0]["address"]
        os.kill(pids[leader], signal.SIGKILL)
        eventually(
            lambda: (r := roster()) and r[0]["address"] != leader,
            timeout=30,
            message="another master leading",
        )
        # The killed master is started again by `agora local` and stands by.
        eventually(lambda: len(roster()) == 3, timeout=30, message="the killed master back")
        hello = subprocess.run(
            [sys.executable, "examples/hello_framework.py", "--master", zk_url, "--tasks", "2"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert hello.returncode == 0, hello.stdout + hello.stderr + local.log_tail()
        assert any("starting it again" in line for line in local.lines)
        # The batch framework followed the new leader too: a job through the zk:// URL runs.
        job = agora(
            "job", "submit", "--master", zk_url, "--wait", "--json", "--", "echo from batch"
        )
        assert job.returncode == 0, job.stdout + job.stderr  # 0: the job succeeded

        # The batch framework runs as a pair: kill -9 its leader, and the other takes over.
        batch_pids = {
            m.group(1): int(m.group(2))
            for line in local.lines
            if (m := re.match(r"batch listening on (\S+) \(pid (\d+);", line))
        }
        assert len(batch_pids) == 2

        def batch_leader() -> str:
            out = agora("cluster", "frameworks", "--json", "--master", zk_url)
            rows = json.loads(out.stdout) if out.returncode == 0 else []
            live = [r for r in rows if r["name"] == "batch" and r.get("connected")]
            return live[0]["service_address"] if live else ""

        first = eventually(batch_leader, timeout=30, message="a batch leader")
        os.kill(batch_pids[first], signal.SIGKILL)
        job = agora(
            "job", "submit", "--master", zk_url, "--wait", "--json", "--", "echo after failover"
        )
        assert job.returncode == 0, job.stdout + job.stderr
        assert batch_leader() not in ("", first)
    finally:
        local.stop(timeout=30)


def test_local_keeps_its_jobs_across_restarts_and_fresh_starts_clean(tmp_path):
    work = tmp_path / "state"

    def start(*extra: str) -> Daemon:
        local = Daemon(
            ["local", "--port", "0", "--agents", "1", "--work-dir", str(work), *extra],
            tmp_path / "local.log",
        ).start(timeout=60)
        eventually(
            lambda: any("batch listening on" in line for line in local.lines),
            timeout=30,
            message="the batch framework",
        )
        return local

    def jobs(master: str) -> str:
        result = agora("job", "list", "--master", master)
        assert result.returncode == 0, result.stderr
        return result.stdout

    local = start()
    try:
        done = agora(
            "job", "submit", "--master", local.address, "--name", "keep-me", "--wait",
            "--", "true",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        local.stop()
    local = start()  # the same folder: the job is still there
    try:
        eventually(lambda: "keep-me" in jobs(local.address), timeout=30, message="the old job")
    finally:
        local.stop()
    local = start("--fresh")
    try:
        assert "keep-me" not in jobs(local.address)
    finally:
        local.stop()
