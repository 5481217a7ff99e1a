"""`agora agent` as a real process: bad flags, and surviving a SIGKILL with tasks running."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from agent_fake_master import FakeMaster, cgroups_available, shell_task
from harness import Daemon, agora, eventually_async

from agora.agent import native_wrapper
from agora.agent.isolation import Isolator, owner_name
from agora.agent.launcher import Wrapper
from agora.v1 import common_pb2 as S

FW = "fw-1"


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--resources", "cpus:four;mem:1024", "cpus takes a number"),
        ("--resources", "cpus:4;bananas:3", "unknown resource 'bananas'"),
        ("--resources", "ports:[5-1]", "range"),
        ("--attributes", "rack", "rack:r1"),
    ],
)
def test_malformed_flag_is_one_line_and_exit_2(tmp_path, flag, value, says):
    result = agora("agent", "--master", "127.0.0.1:5050", "--work-dir", str(tmp_path), flag, value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agora agent: error: argument " + flag) and says in lines[0]


def test_help_explains_each_flag():
    out = agora("agent", "--help").stdout
    for flag in (
        "--master",
        "--port",
        "--host",
        "--resources",
        "--attributes",
        "--work-dir",
        "--advertise-ip",
        "--hostname",
        "--log-format",
    ):
        assert flag in out
    assert "memory minus 1 GB" in out


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3)
    await m.start()
    yield m
    await m.stop()


class AgentProcess:
    def __init__(self, master: FakeMaster, root: Path) -> None:
        self.work_dir = root / "agent"
        self.args = [
            "agent",
            "--master",
            master.address,
            "--port",
            "0",
            "--work-dir",
            str(self.work_dir),
            "--resources",
            "cpus:2;mem:1024;ports:[31000-31009]",
            "--attributes",
            "rack:r1",
            "--log-level",
            "debug",
        ]
        self.logs = root / "logs"
        self.daemon: Daemon | None = None
        self.all: list[Daemon] = []
        self.runs = 0

    async def start(self) -> Daemon:
        self.runs += 1
        self.daemon = Daemon(self.args, self.logs / f"agent-{self.runs}.log")
        self.all.append(self.daemon)
        await asyncio.to_thread(self.daemon.start)
        return self.daemon

    async def sigkill(self) -> None:
        assert self.daemon is not None
        await asyncio.to_thread(self.daemon.kill, signal.SIGKILL)

    def cleanup(self) -> None:
        for daemon in self.all:
            daemon.stop()
            if daemon.proc is not None and daemon.proc.stdout is not None:
                daemon.proc.stdout.close()
        # Tasks outlive their agent by design: end those a failed test left behind.
        for wrapper_file in self.work_dir.glob("meta/runs/*/wrapper.json"):
            wrapper = Wrapper.load(wrapper_file.parent)
            if wrapper is not None and wrapper.alive():
                wrapper.signal_group(signal.SIGKILL)


@pytest.fixture
def agent_process(master, tmp_path):
    process = AgentProcess(master, tmp_path)
    yield process
    process.cleanup()


async def registered(master: FakeMaster, count: int):
    await eventually_async(
        lambda: len(master.registrations) >= count and master.connected,
        timeout=30,
        message=f"registration {count}",
    )
    return master.registrations[count - 1]


async def test_sigkilled_agent_recovers_its_running_task(master, agent_process):
    await agent_process.start()
    first = await registered(master, 1)
    assert first.info.agent_id == ""
    master.run_task(FW, shell_task("long", "while [ ! -e go ]; do sleep 0.05; done"))
    await eventually_async(lambda: master.states("long") == [S.TASK_STARTING, S.TASK_RUNNING])
    sandbox = agent_process.work_dir / "sandboxes" / FW / "long"

    await agent_process.sigkill()
    await eventually_async(lambda: not master.connected, message="stream broken")
    await agent_process.start()
    reg = await registered(master, 2)
    assert reg.info.agent_id == "agent-1"  # the id survived the restart
    assert [(t.framework_id, t.task.task_id, t.state) for t in reg.tasks] == [
        (FW, "long", S.TASK_RUNNING)
    ]

    (sandbox / "go").touch()
    final = await eventually_async(lambda: master.terminal("long"), message="FINISHED")
    assert final.state == S.TASK_FINISHED
    # Acknowledged at once by the fake master: never sent again. An earlier update may come
    # twice (its ack can be lost with the SIGKILLed agent: at-least-once), the final one not.
    beats = master.heartbeats
    await eventually_async(lambda: master.heartbeats >= beats + 6, message="heartbeats")
    states = master.states("long")
    assert states.count(S.TASK_FINISHED) == 1
    assert [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s] == [
        S.TASK_STARTING,
        S.TASK_RUNNING,
        S.TASK_FINISHED,
    ]


async def test_sigkill_loses_no_unacknowledged_update(master, agent_process):
    master.auto_ack = False
    await agent_process.start()
    await registered(master, 1)
    master.run_task(FW, shell_task("short", "exit 5"))
    await eventually_async(lambda: S.TASK_STARTING in master.states("short"))
    # The task ends whether or not its agent is there to see it.
    await agent_process.sigkill()
    exit_file = next(agent_process.work_dir.glob("meta/runs/*/exit.json"), None)
    await eventually_async(
        lambda: next(agent_process.work_dir.glob("meta/runs/*/exit.json"), None) or exit_file,
        message="the task's exit file",
    )

    master.auto_ack = True
    await agent_process.start()
    await registered(master, 2)
    final = await eventually_async(lambda: master.terminal("short"), message="final update")
    assert final.state == S.TASK_FAILED and final.exit_code == 5
    after = [u for u in master.updates if u.task_id == "short"]
    # STARTING (unacknowledged before the kill) came again, then RUNNING, then FAILED once.
    states = [u.state for u in after]
    assert states[-3:] == [S.TASK_STARTING, S.TASK_RUNNING, S.TASK_FAILED]
    assert states.count(S.TASK_FAILED) == 1 and states.count(S.TASK_RUNNING) == 1


async def test_sigterm_leaves_tasks_running_and_sigusr1_kills_them(master, agent_process):
    await agent_process.start()
    await registered(master, 1)
    master.run_task(FW, shell_task("stays", "sleep 300"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("stays"))
    run_dir = next(agent_process.work_dir.glob("meta/runs/*"))
    wrapper = await eventually_async(lambda: Wrapper.load(run_dir))

    await asyncio.to_thread(agent_process.daemon.stop)  # SIGTERM
    assert agent_process.daemon.proc.returncode == 0
    assert wrapper.alive()

    daemon = await agent_process.start()
    reg = await registered(master, 2)
    assert [t.task.task_id for t in reg.tasks] == ["stays"]
    await asyncio.to_thread(daemon.kill, signal.SIGUSR1)
    assert daemon.proc.returncode == 0
    await eventually_async(lambda: not wrapper.alive(), message="task killed")
    final = master.terminal("stays")
    assert final is not None and final.state == S.TASK_KILLED


def _cgroups_of(directories: list[str]) -> set[str]:
    return {str(p) for d in directories for p in Path(d).iterdir() if p.is_dir()}


needs_cgroups = pytest.mark.skipif(
    not cgroups_available(), reason="this host does not let the agent make cgroups"
)


@needs_cgroups
async def test_a_restarted_agent_removes_the_cgroups_its_predecessor_kept(master, agent_process):
    """An agent keeps a finished task's cgroups for its next task; one SIGKILLed keeps them for
    no one. The next agent on its work dir removes them, and only them: a task still running
    keeps its own."""
    directories = Isolator(owner=owner_name(agent_process.work_dir)).directories
    await agent_process.start()
    await registered(master, 1)
    master.run_task(FW, shell_task("live", "while [ ! -e go ]; do sleep 0.05; done"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("live"))
    live = _cgroups_of(directories)
    master.run_task(FW, shell_task("done", "true"))
    await eventually_async(lambda: master.terminal("done"))
    kept = _cgroups_of(directories) - live
    assert len(live) == len(directories) and len(kept) == len(directories)
    await agent_process.sigkill()
    assert _cgroups_of(directories) == live | kept

    master.auto_ack = True
    await agent_process.start()
    await registered(master, 2)
    await eventually_async(lambda: _cgroups_of(directories) == live, message="kept cgroups gone")
    (agent_process.work_dir / "sandboxes" / FW / "live" / "go").touch()
    assert (await eventually_async(lambda: master.terminal("live"))).state == S.TASK_FINISHED
    # A run the last agent started is not kept by this one: its cgroups go as it ends.
    await eventually_async(lambda: not _cgroups_of(directories), message="live's cgroups gone")


@needs_cgroups
async def test_a_task_that_ends_with_its_agent_gone_leaves_no_cgroups(master, agent_process):
    """An agent stopped with SIGTERM leaves its tasks running; one that ends before any agent
    comes back has its cgroups removed by its wrapper, which nobody else would do."""
    directories = Isolator(owner=owner_name(agent_process.work_dir)).directories
    await agent_process.start()
    await registered(master, 1)
    master.run_task(FW, shell_task("orphan", "while [ ! -e go ]; do sleep 0.05; done"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("orphan"))
    assert len(_cgroups_of(directories)) == len(directories)
    run_dir = next(agent_process.work_dir.glob("meta/runs/*"))
    await asyncio.to_thread(agent_process.daemon.stop)  # SIGTERM: the task stays
    assert agent_process.daemon.proc.returncode == 0
    (agent_process.work_dir / "sandboxes" / FW / "orphan" / "go").touch()
    await eventually_async(lambda: (run_dir / "exit.json").exists(), message="the task's end")
    await eventually_async(lambda: not _cgroups_of(directories), message="its cgroups gone")


async def test_a_task_sees_nothing_of_the_agents_environment_but_what_is_allowed(
    master, agent_process
):
    """Issue 35: a secret set for the agent must not reach tenants' tasks."""
    agent_process.args += ["--task-env", "AGORA_TEST_ALLOWED"]
    env = {"AGORA_TEST_SECRET": "hunter2", "AGORA_TEST_ALLOWED": "yes"}
    agent_process.daemon = Daemon(agent_process.args, agent_process.logs / "agent-env.log", env=env)
    agent_process.all.append(agent_process.daemon)
    await asyncio.to_thread(agent_process.daemon.start)
    await registered(master, 1)
    master.run_task(FW, shell_task("env", "env", env={"MINE": "given"}))
    final = await eventually_async(lambda: master.terminal("env"), message="the task ends")
    assert final.state == S.TASK_FINISHED
    seen = dict(
        line.split("=", 1)
        for line in (agent_process.work_dir / "sandboxes" / FW / "env" / "stdout")
        .read_text()
        .splitlines()
        if "=" in line
    )
    assert "AGORA_TEST_SECRET" not in seen and "hunter2" not in seen.values()
    assert seen["AGORA_TEST_ALLOWED"] == "yes" and seen["MINE"] == "given"
    assert seen["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert seen["AGORA_TASK_ID"] == "env"
    assert not any(name.startswith(("VIRTUAL_ENV", "PYTEST")) for name in seen)


def test_a_bad_task_env_name_is_one_line(tmp_path):
    result = agora(
        "agent", "--master", "127.0.0.1:5050", "--work-dir", str(tmp_path), "--task-env", "A-B"
    )
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "not a variable name" in result.stderr


async def test_a_fork_bomb_stops_at_the_tasks_pids_limit(master, agent_process):
    """Issue 35: a task that forks without end is bounded by its pids cgroup; the agent and
    another task on it go on. (A bounded bomb: 200 sleepers, so a broken limit cannot take the
    host.)"""
    if not cgroups_available():
        pytest.skip("needs cgroups (root)")
    agent_process.args += ["--task-pids-max", "40"]
    await agent_process.start()
    await registered(master, 1)
    # Forks 200 sleepers, saying so when the kernel refuses one, and stays (a shell would give
    # up at its first refused fork).
    bomb = (
        "python3 -c 'import os, sys, time\n"
        "for i in range(200):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "    except OSError as e:\n"
        '        print("fork refused:", e, file=sys.stderr, flush=True)\n'
        "time.sleep(60)'"
    )
    master.run_task(FW, shell_task("bomb", bomb))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("bomb"), message="running")
    record = next(agent_process.work_dir.glob("meta/runs/*/task.json"))
    cgroups = json.loads(record.read_text())["cgroups"]
    pids_cgroup = next(Path(p) for p in cgroups if "/pids/" in p or Path(p, "pids.max").exists())
    assert (pids_cgroup / "pids.max").read_text().strip() == "40"
    sandbox = agent_process.work_dir / "sandboxes" / FW / "bomb"
    most = 0

    def refused() -> bool:
        nonlocal most
        try:
            most = max(most, int((pids_cgroup / "pids.current").read_text()))
        except (OSError, ValueError):
            pass
        return "fork" in (sandbox / "stderr").read_text().lower()

    await eventually_async(refused, timeout=30, message="forks refused")
    assert most <= 40
    master.run_task(FW, shell_task("neighbour", "echo still here"))
    final = await eventually_async(lambda: master.terminal("neighbour"), message="neighbour")
    assert final.state == S.TASK_FINISHED
    master.kill_task(FW, "bomb")
    ended = await eventually_async(lambda: master.terminal("bomb"), message="the bomb ends")
    assert ended.state == S.TASK_KILLED


def _work_dir_under(agent_process: AgentProcess, parent: str) -> Path:
    """Moves the agent's work dir beneath `parent`; the caller removes what it returns."""
    root = Path(tempfile.mkdtemp(prefix="agora-ns-", dir=parent))
    at = agent_process.args.index("--work-dir") + 1
    agent_process.work_dir = root / "agent"
    agent_process.args[at] = str(agent_process.work_dir)
    return root


async def test_tasks_get_namespaces_by_default_where_the_host_allows_them(master, agent_process):
    """No flag: a root agent with the C wrapper runs each task as pid 1's child in a pid
    namespace of its own, and says so (AgentInfo.isolation)."""
    await agent_process.start()
    reg = await registered(master, 1)
    assert "namespaces" in reg.info.isolation
    master.run_task(FW, shell_task("probe", "echo $$; ls -d /proc/[0-9]* | wc -l"))
    final = await eventually_async(lambda: master.terminal("probe"), message="the probe ends")
    assert final.state == S.TASK_FINISHED, final.message
    pid, processes = (
        (agent_process.work_dir / "sandboxes" / FW / "probe" / "stdout").read_text().split()
    )
    assert pid == "2" and int(processes) <= 4  # the init, the shell, and its pipeline


async def test_without_the_c_wrapper_the_default_runs_tasks_plain_and_says_why(
    master, agent_process, monkeypatch
):
    monkeypatch.setenv(native_wrapper.ENV_SWITCH, "0")
    await agent_process.start()
    reg = await registered(master, 1)
    assert "no-namespaces" in reg.info.isolation
    log = (agent_process.logs / "agent-1.log").read_text()
    assert "tasks run without namespaces" in log and "needs the C task wrapper" in log
    master.run_task(FW, shell_task("plain", "true"))
    final = await eventually_async(lambda: master.terminal("plain"), message="it ends")
    assert final.state == S.TASK_FINISHED, final.message


def test_an_agent_told_task_namespaces_refuses_to_start_without_them(tmp_path):
    result = agora(
        "agent", "--master", "127.0.0.1:1", "--port", "0", "--work-dir", str(tmp_path / "a"),
        "--task-namespaces",
        env=dict(os.environ, **{native_wrapper.ENV_SWITCH: "0"}),
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "--task-namespaces needs the C task wrapper" in lines[0]
    assert "--no-task-namespaces" in lines[0]


# Where the work dir lives decides how the others' sandboxes are hidden: beneath /tmp or
# /dev/shm, the task's own fresh tmpfs there hides them; elsewhere a tmpfs over the sandboxes.
@pytest.mark.parametrize("parent", ["/tmp", "/dev/shm", "/var/tmp"])
async def test_tasks_in_namespaces_do_not_see_each_other_though_one_user_runs_both(
    master, agent_process, parent
):
    """Issue 35: two tasks of one Unix user. In namespaces of their own (--task-namespaces),
    neither reads the other's /proc/PID/environ, signals it, or lists its sandbox; each sees
    its own processes only and a private /tmp."""
    root = _work_dir_under(agent_process, parent)
    try:
        await _tasks_do_not_see_each_other(master, agent_process)
    finally:
        agent_process.cleanup()
        shutil.rmtree(root, ignore_errors=True)


async def _tasks_do_not_see_each_other(master, agent_process) -> None:
    agent_process.args += ["--task-namespaces"]
    await agent_process.start()
    reg = await registered(master, 1)
    assert "namespaces" in reg.info.isolation
    first = shell_task("first", "touch /tmp/mine; sleep 60", env={"MY_SECRET": "alpha"})
    first.command.user = "nobody"
    master.run_task(FW, first)
    await eventually_async(lambda: S.TASK_RUNNING in master.states("first"), message="running")
    wrapper = json.loads(next(agent_process.work_dir.glob("meta/runs/*/wrapper.json")).read_text())
    other_sandbox = agent_process.work_dir / "sandboxes" / FW / "first"
    probe = (
        "for p in /proc/[0-9]*; do "
        "tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -q MY_SECRET=alpha && echo FOUND $p; "
        "done; "
        f"ls {other_sandbox} >/dev/null 2>&1 && echo LISTED; "
        f"kill -0 {wrapper['task_pid']} 2>/dev/null && echo SIGNALLED; "
        "ls /tmp; echo processes $(ls -d /proc/[0-9]* | wc -l); echo done"
    )
    second = shell_task("second", probe)
    second.command.user = "nobody"
    master.run_task(FW, second)
    final = await eventually_async(lambda: master.terminal("second"), message="the probe ends")
    assert final.state == S.TASK_FINISHED, final.message
    out = (agent_process.work_dir / "sandboxes" / FW / "second" / "stdout").read_text()
    assert out.rstrip().endswith("done"), out
    for word in ("FOUND", "LISTED", "SIGNALLED", "mine"):
        assert word not in out, out
    processes = int(out.split("processes")[1].split()[0])
    assert processes <= 6, out  # its init, its shell, and the subshell, ls and wc counting
    master.kill_task(FW, "first")
    killed = await eventually_async(lambda: master.terminal("first"), message="first killed")
    assert killed.state == S.TASK_KILLED


async def test_a_task_in_namespaces_ends_as_its_command_did(master, agent_process):
    """The init between the wrapper and the command passes the command's end on: an exit code,
    or the signal that killed it."""
    agent_process.args += ["--task-namespaces"]
    await agent_process.start()
    await registered(master, 1)
    master.run_task(FW, shell_task("three", "exit 3"))
    master.run_task(FW, shell_task("killed", "kill -9 $$"))
    three = await eventually_async(lambda: master.terminal("three"), message="three ends")
    assert three.state == S.TASK_FAILED and three.exit_code == 3, three.message
    killed = await eventually_async(lambda: master.terminal("killed"), message="killed ends")
    assert killed.state == S.TASK_FAILED and "signal SIGKILL" in killed.message, killed.message


async def test_a_kill_reaches_the_command_in_namespaces_not_its_init(master, agent_process):
    """SIGTERM goes to the task's group: its init lives through it and the command, which
    traps it, ends within its grace; the init then ends with it and the task is KILLED."""
    agent_process.args += ["--task-namespaces"]
    await agent_process.start()
    await registered(master, 1)
    master.run_task(
        FW, shell_task("trapper", "trap 'echo got TERM; exit 0' TERM; echo ready; "
                                  "while :; do sleep 0.05; done", grace=30)
    )  # fmt: skip
    stdout = agent_process.work_dir / "sandboxes" / FW / "trapper" / "stdout"
    await eventually_async(lambda: stdout.exists() and "ready" in stdout.read_text())
    master.kill_task(FW, "trapper", grace=30)
    final = await eventually_async(lambda: master.terminal("trapper"), message="it ends")
    assert final.state == S.TASK_KILLED, final.message
    assert "got TERM" in stdout.read_text()


async def test_a_kill_reaches_what_left_the_tasks_process_group_in_namespaces(
    master, agent_process
):
    """A daemon the command started in a session of its own gets the kill's SIGTERM from the
    task's init (its process group got it from outside), and may end cleanly within the
    grace, rather than be SIGKILLed with the namespace once the command is gone."""
    agent_process.args += ["--task-namespaces"]
    await agent_process.start()
    await registered(master, 1)
    daemon = "trap 'echo stray got TERM >> strays; exit 0' TERM; while :; do sleep 0.05; done"
    master.run_task(
        FW,
        shell_task("parent", f"setsid sh -c \"{daemon}\" & echo ready; "
                             "trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.05; done",
                   grace=30),
    )  # fmt: skip
    sandbox = agent_process.work_dir / "sandboxes" / FW / "parent"
    await eventually_async(lambda: "ready" in (sandbox / "stdout").read_text())
    master.kill_task(FW, "parent", grace=30)
    final = await eventually_async(lambda: master.terminal("parent"), message="it ends")
    assert final.state == S.TASK_KILLED, final.message
    assert (sandbox / "strays").read_text() == "stray got TERM\n"


async def test_a_root_task_in_namespaces_cannot_lift_what_hides_the_others(master, agent_process):
    """Its seccomp filter refuses mount, umount, unshare and the kernel's administration, its
    capabilities are Docker's default set and the cgroup file system is hidden, so not even
    root inside can uncover the other sandboxes, leave its namespaces or its limits."""
    agent_process.args += ["--task-namespaces"]
    await agent_process.start()
    await registered(master, 1)
    probe = (
        "umount /tmp 2>/dev/null && echo UNMOUNTED; "
        "mount -t tmpfs x /mnt 2>/dev/null && echo MOUNTED; "
        "unshare -m true 2>/dev/null && echo UNSHARED; "
        "echo $$ 2>/dev/null > /sys/fs/cgroup/cgroup.procs && echo ESCAPED; "
        "grep -q 'CapEff:.*1fffff' /proc/self/status && echo ALLCAPS; id -u; echo done"
    )
    master.run_task(FW, shell_task("root", probe))
    final = await eventually_async(lambda: master.terminal("root"), message="the probe ends")
    assert final.state == S.TASK_FINISHED, final.message
    out = (agent_process.work_dir / "sandboxes" / FW / "root" / "stdout").read_text()
    assert out.split() == ["0", "done"], out


async def test_a_task_runs_under_the_limits_its_framework_lowered(master, agent_process):
    """TaskInfo.rlimits, set by the wrapper before the exec; never above the agent's own."""
    await agent_process.start()
    await registered(master, 1)
    task = shell_task("limited", "ulimit -n; ulimit -c; ulimit -Hn")
    task.rlimits.update({"nofile": 64, "core": 0})
    master.run_task(FW, task)
    final = await eventually_async(lambda: master.terminal("limited"), message="it ends")
    assert final.state == S.TASK_FINISHED, final.message
    out = (agent_process.work_dir / "sandboxes" / FW / "limited" / "stdout").read_text()
    assert out.split() == ["64", "0", "64"], out


def test_an_rlimit_above_the_agents_own_is_lowered_to_it():
    import resource

    from agora.agent.task_manager import rlimit_values, task_rlimits

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    asked = {"nofile": 10**12, "core": 0}
    expected = 10**12 if hard == resource.RLIM_INFINITY else hard
    assert rlimit_values(asked) == {"core": 0, "nofile": expected}
    assert task_rlimits(asked) == f"core:0,nofile:{expected}"
