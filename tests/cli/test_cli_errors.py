"""Commands that fail name the cause (issue 32), against a real master: its dashboard's port
given as --master, a closed port, a name that does not resolve. And `agora job logs` reads a
task's output where its agent is now, after the agent came back on another address."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest
from harness import ROOT, Cluster, Daemon, eventually

pytestmark = [pytest.mark.e2e]


def agora(*args: str, master: str) -> subprocess.CompletedProcess:
    cut = args.index("--") if "--" in args else len(args)
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args[:cut], "--master", master, *args[cut:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_command_names_why_it_cannot_get_through(tmp_path):
    master = Daemon(
        ["master", "--port", "0", "--http-port", "0", "--state-dir", str(tmp_path / "m")],
        tmp_path / "master.log",
    ).start()
    try:
        dashboard = eventually(
            lambda: next(
                (ln.split("//")[1].rstrip("/") for ln in master.lines if "dashboard on" in ln), None
            ),
            timeout=10,
            message="the dashboard's address",
        )
        for command in (["cluster", "agents"], ["job", "list"], ["app", "list"]):
            wrong = agora(*command, master=dashboard)
            assert wrong.returncode == 1, (command, wrong.stderr)
            assert wrong.stderr.count("\n") == 1, (command, wrong.stderr)
            assert "answers HTTP/1, not gRPC" in wrong.stderr, (command, wrong.stderr)

        closed = f"127.0.0.1:{_closed_port()}"
        for command in (["cluster", "state"], ["job", "list"], ["task", "logs", "t1"]):
            refused = agora(*command, master=closed)
            assert refused.returncode == 1, (command, refused.stderr)
            assert "connection refused" in refused.stderr, (command, refused.stderr)
            assert "Traceback" not in refused.stderr

        nowhere = agora("cluster", "agents", master="no-such-host.invalid:5050")
        assert nowhere.returncode == 1
        assert "'no-such-host.invalid' does not resolve" in nowhere.stderr
        # A set of masters, none answering: each named with its cause.
        both = agora("cluster", "agents", master=f"{closed},no-such-host.invalid:5050")
        assert both.returncode == 1 and both.stderr.count("\n") == 1
        assert f"{closed}: connection refused" in both.stderr
        assert "no-such-host.invalid:5050: name does not resolve" in both.stderr
        # The master's log has one line for the HTTP/2 preface on its HTTP port, no traceback.
        text = (tmp_path / "master.log").read_text()
        assert "Traceback" not in text and "gRPC client given the HTTP port" in text
    finally:
        master.stop()


def test_job_logs_follow_an_agent_that_came_back_on_another_address(tmp_path):
    cluster = Cluster(tmp_path, heartbeat=0.5, agent_timeout=30)
    cluster.start_master()
    master = cluster.master.address
    assert master
    batch = Daemon(
        ["batch", "--master", master, "--port", "0", "--state-dir", str(tmp_path / "batch")],
        tmp_path / "logs" / "batch.log",
    )
    try:
        first = cluster.start_agent(0)
        batch.start()
        submitted = agora(
            "job", "submit", "--instances", "1", "--cpus", "0.1", "--mem", "16", "--wait",
            "--", "echo", "hello from the first agent",
            master=master,
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr + cluster.logs()
        job_id = submitted.stdout.splitlines()[0]  # then its progress, to SUCCEEDED
        before = agora("job", "logs", job_id, master=master)
        assert before.returncode == 0 and "hello from the first agent" in before.stdout

        # The agent restarts on the same work dir (same id, same sandboxes) on another port:
        # the batch daemon still holds the address of the offer it launched on.
        first.stop(sig=signal.SIGTERM)
        again = cluster.restart_agent(0)
        assert again.address != first.address

        def moved():
            agents = json.loads(agora("cluster", "agents", "--json", master=master).stdout)
            return [a for a in agents if a["address"] == again.address]

        eventually(moved, timeout=30, message="the agent re-registered at its new address")
        after = agora("job", "logs", job_id, master=master)
        assert after.returncode == 0, after.stderr
        assert "hello from the first agent" in after.stdout
    finally:
        batch.stop()
        cluster.stop()


def test_a_grpc_error_a_command_leaves_uncaught_is_one_line_naming_its_cause():
    import argparse

    import grpc

    from agora.cli.main import _rpc_failure
    from agora.v1 import operator_pb2, operator_pb2_grpc

    closed = f"127.0.0.1:{_closed_port()}"
    with grpc.insecure_channel(closed) as channel:
        try:
            operator_pb2_grpc.OperatorStub(channel).ListMasters(
                operator_pb2.ListMastersRequest(), timeout=5
            )
        except grpc.RpcError as e:
            error = e
    said = _rpc_failure(error, argparse.Namespace(master=closed))
    assert said is not None and said.startswith(f"cannot reach the master at {closed}")
    assert "connection refused" in said
    assert _rpc_failure(ValueError("not grpc"), argparse.Namespace(master=closed)) is None


def test_a_drain_deadline_that_is_no_duration_is_refused_saying_what_to_write():
    # Refused before any call: no master is needed.
    result = agora("cluster", "drain", "agent-1", "--deadline", "soon", master="127.0.0.1:1")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "'soon' is not a duration: write e.g. 90s, 10m, 1h30m or 2d" in line


def test_durations_read_as_people_write_them():
    from agora.cli.options import duration

    assert [duration(t) for t in ("90", "90s", "10m", "1h30m", "2d", "1.5h")] == [
        90,
        90,
        600,
        5400,
        172800,
        5400,
    ]
