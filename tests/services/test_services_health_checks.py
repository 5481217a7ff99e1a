"""Agent-side health checks: HTTP, TCP and command checks run next to real tasks, and their
verdicts arrive as reliable TASK_RUNNING updates with `healthy` set."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import agora, eventually_async
from oci_image import build_image

from agora.agent import AgentConfig, AgentDaemon
from agora.agent.health_checks import CheckSpec, HealthVerdict, probe
from agora.common import Resources
from agora.v1 import common_pb2

FW = "fw-health"
S = common_pb2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3)
    await m.start()
    yield m
    await m.stop()


@pytest.fixture
async def agent(master, tmp_path):
    port = free_port()
    daemon = AgentDaemon(
        AgentConfig(
            master=master.address,
            port=0,
            work_dir=tmp_path / "agent",
            hostname="host-a",
            resources=Resources.parse(f"cpus:2;mem:1024;ports:[{port}-{port}]"),
            reconnect_backoff_initial_seconds=0.05,
            reconnect_backoff_max_seconds=0.5,
            update_backoff_initial_seconds=0.2,
            update_backoff_max_seconds=1.0,
        )
    )
    await daemon.start()
    daemon.test_port = port
    await eventually_async(lambda: master.connected, timeout=20, message="registration")
    yield daemon
    await daemon.stop(kill_tasks=True)


def with_check(task: S.TaskInfo, **fields) -> S.TaskInfo:
    timing = dict(interval_seconds=0.1, timeout_seconds=2, max_consecutive_failures=2)
    timing.update({k: v for k, v in fields.items() if k.endswith(("seconds", "failures"))})
    check = S.HealthCheck(**timing)
    if "http" in fields:
        check.http.CopyFrom(fields["http"])
    if "tcp" in fields:
        check.tcp.CopyFrom(fields["tcp"])
    if "command" in fields:
        check.command.CopyFrom(fields["command"])
    task.health_check.CopyFrom(check)
    return task


def health_updates(master: FakeMaster, task_id: str) -> list[S.TaskStatus]:
    return [u for u in master.updates if u.task_id == task_id and u.HasField("healthy")]


def verdicts(master: FakeMaster, task_id: str) -> list[bool]:
    return [u.healthy for u in health_updates(master, task_id)]


async def test_http_check_reports_healthy_then_unhealthy_when_the_server_stops(master, agent):
    port = agent.test_port
    # The server runs until a file appears in its sandbox, then the task lives on without it.
    script = (
        "python3 -m http.server $PORT0 --bind 127.0.0.1 & pid=$!; "
        "while [ ! -e stop ]; do sleep 0.05; done; kill $pid; sleep 100"
    )
    task = with_check(
        shell_task("web", script, ports=[(port, port)]),
        http=S.HttpCheck(port_index=0, path="/"),
        grace_period_seconds=60,
    )
    master.run_task(FW, task)
    await eventually_async(lambda: verdicts(master, "web") == [True], timeout=30, message="healthy")
    first = health_updates(master, "web")[0]
    assert first.state == S.TASK_RUNNING and len(first.uuid) == 16
    assert first.reason == "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
    assert "HTTP 200" in first.message

    run = agent.tasks.find(FW, "web")
    (run.sandbox / "stop").touch()
    await eventually_async(
        lambda: verdicts(master, "web") == [True, False],
        timeout=30,
        message="unhealthy after the server stopped",
    )
    assert "2 consecutive failure(s)" in health_updates(master, "web")[-1].message
    # Still running: the agent reports, the framework decides what to kill.
    assert master.terminal("web") is None


async def test_a_command_check_runs_in_the_tasks_namespaces(master, agent):
    """The task's /tmp is its own (namespaces by default, as root): its check sees what the
    task put there, and the task's processes, as the task's user, not the host's."""
    assert agent.namespaces
    marker = f"/tmp/ready-{id(agent)}"
    task = with_check(
        shell_task("inner", f"touch {marker}; chmod 600 {marker}; sleep 100"),
        command=S.CommandInfo(
            shell=f'test -O {marker} && [ "$(id -un)" = nobody ] '
            '&& ps -eo args | grep -q "^sleep 100"'
        ),
    )
    task.command.user = "nobody"
    master.run_task(FW, task)
    await eventually_async(
        lambda: verdicts(master, "inner") == [True], timeout=30, message="healthy inside"
    )
    assert not Path(marker).exists()  # the host's /tmp never had it


async def test_a_command_check_of_an_image_task_runs_in_its_files(master, agent, tmp_path):
    """A task from an image: its check runs in the image's root, in its sandbox there."""
    work_dir = agent.config.work_dir
    imported = await asyncio.to_thread(
        agora, "agent", "image", "import", str(build_image(tmp_path / "image")[0]),
        "--name", "agora-test", "--work-dir", str(work_dir),
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    task = with_check(
        shell_task("boxed", "echo up > here; sleep 100"),
        command=S.CommandInfo(
            shell='grep -q "ID=agora-busybox" /etc/os-release && [ "$PWD" = "$AGORA_SANDBOX" ] '
            "&& test -f here"
        ),
    )
    task.container.image = "agora-test"
    master.run_task(FW, task)
    await eventually_async(
        lambda: verdicts(master, "boxed") == [True], timeout=30, message="healthy in the image"
    )
    # With a network of its own ("none"), the task sees only its loopback: so does its check
    # (/proc/net/dev: two lines of headers, then one per interface).
    alone = with_check(
        shell_task("alone", "sleep 100"),
        command=S.CommandInfo(
            shell="n=0; while read line; do n=$((n+1)); done < /proc/net/dev; [ $n -eq 3 ]"
        ),
    )
    alone.container.image = "agora-test"
    alone.container.network = "none"
    master.run_task(FW, alone)
    await eventually_async(
        lambda: verdicts(master, "alone") == [True], timeout=30, message="only its loopback"
    )


async def test_tcp_check_reports_healthy_while_something_listens(master, agent):
    port = agent.test_port
    script = (
        "python3 -c 'import os,socket,time; s=socket.socket(); "
        's.bind(("127.0.0.1", int(os.environ["PORT0"]))); s.listen(); time.sleep(100)\''
    )
    task = with_check(
        shell_task("tcp", script, ports=[(port, port)]),
        tcp=S.TcpCheck(port_index=0),
        grace_period_seconds=60,
    )
    master.run_task(FW, task)
    await eventually_async(
        lambda: verdicts(master, "tcp") == [True], timeout=30, message="healthy over TCP"
    )


async def test_command_check_runs_in_the_sandbox_and_flips_on_exit_code(master, agent):
    task = with_check(
        shell_task("cmd", "sleep 100"),
        command=S.CommandInfo(shell='test ! -e "$AGORA_SANDBOX/sick"'),
    )
    master.run_task(FW, task)
    await eventually_async(
        lambda: verdicts(master, "cmd") == [True], timeout=30, message="healthy command check"
    )
    (agent.tasks.find(FW, "cmd").sandbox / "sick").touch()
    await eventually_async(
        lambda: verdicts(master, "cmd") == [True, False],
        timeout=30,
        message="unhealthy after the command started failing",
    )
    (agent.tasks.find(FW, "cmd").sandbox / "sick").unlink()
    await eventually_async(
        lambda: verdicts(master, "cmd") == [True, False, True], timeout=30, message="healthy again"
    )


async def test_failures_within_the_grace_period_are_not_reported(master, agent):
    # The check fails until the file exists (and notes each run); a long grace period hides
    # those failures.
    task = with_check(
        shell_task("slow", "sleep 100"),
        grace_period_seconds=60,
        command=S.CommandInfo(
            shell='echo ran >> "$AGORA_SANDBOX/checks"; test -e "$AGORA_SANDBOX/ready"'
        ),
    )
    master.run_task(FW, task)
    run = await eventually_async(lambda: agent.tasks.find(FW, "slow"), message="the run")
    checks = run.sandbox / "checks"
    await eventually_async(
        lambda: checks.exists() and len(checks.read_text().splitlines()) >= 2,
        timeout=30,
        message="two failed checks within the grace period",
    )
    verdict = agent.health._verdicts[(FW, "slow")]
    assert verdict.consecutive_failures == 0 and verdict.healthy is None
    assert verdicts(master, "slow") == []  # nothing reported while starting
    (run.sandbox / "ready").touch()
    await eventually_async(
        lambda: verdicts(master, "slow") == [True], timeout=30, message="healthy once ready"
    )


async def test_checker_stops_when_the_task_ends(master, agent):
    task = with_check(
        shell_task("brief", 'while [ ! -e "$AGORA_SANDBOX/end" ]; do sleep 0.05; done'),
        command=S.CommandInfo(shell="true"),
    )
    master.run_task(FW, task)
    await eventually_async(lambda: verdicts(master, "brief") == [True], message="healthy")
    (agent.tasks.find(FW, "brief").sandbox / "end").touch()
    await eventually_async(lambda: master.terminal("brief"), message="finished")
    await eventually_async(
        lambda: not agent.health.checking(FW, "brief"), message="checker stopped"
    )


# --- the pure part --------------------------------------------------------------------------


def spec(**kw) -> CheckSpec:
    return CheckSpec("tcp", port=1, **kw)


def test_verdict_is_healthy_on_first_success_and_reports_only_changes():
    v = HealthVerdict(spec(max_failures=3), started_at=0)
    assert v.record(True, 1) is True
    assert v.record(True, 2) is None
    assert v.record(False, 3) is None
    assert v.record(False, 4) is None
    assert v.record(False, 5) is False
    assert v.record(False, 6) is None
    assert v.record(True, 7) is True


def test_grace_period_hides_failures_only_before_the_first_success():
    v = HealthVerdict(spec(max_failures=1, grace_period=10), started_at=0)
    assert v.record(False, 5) is None and v.consecutive_failures == 0
    assert v.record(False, 11) is False  # grace over
    v = HealthVerdict(spec(max_failures=1, grace_period=10), started_at=0)
    assert v.record(True, 1) is True
    assert v.record(False, 2) is False  # healthy once: the grace period has ended


def test_spec_defaults_and_bad_port_index():
    check = S.HealthCheck(http=S.HttpCheck(port_index=0))
    s = CheckSpec.from_proto(check, [8080])
    assert (s.port, s.path, s.interval, s.timeout, s.max_failures) == (8080, "/", 10, 20, 3)
    with pytest.raises(ValueError, match="PORT1"):
        CheckSpec.from_proto(S.HealthCheck(tcp=S.TcpCheck(port_index=1)), [8080])
    assert CheckSpec.from_proto(S.HealthCheck(), []) is None


async def test_probe_of_a_closed_port_fails_with_the_reason():
    ok, detail = await probe(CheckSpec("tcp", port=free_port(), timeout=2))
    assert not ok and detail


async def test_http_probe_counts_error_statuses_as_failures(tmp_path):
    import asyncio
    import sys

    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp_path),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        (tmp_path / "ok.txt").write_text("ok")
        good = CheckSpec("http", port=port, path="/ok.txt", timeout=2)
        await eventually_async(lambda: _ok(probe(good)), message="the test server")
        ok, detail = await probe(CheckSpec("http", port=port, path="/missing", timeout=2))
        assert (ok, detail) == (False, "HTTP 404")
    finally:
        server.kill()
        await server.wait()


async def _ok(result) -> bool:
    ok, _ = await result
    return ok
