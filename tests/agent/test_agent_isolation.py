"""Tasks in cgroups: their memory limit is set, escapees from the process group still die.

Skipped where the agent may not create cgroups (it then runs tasks with process groups only).
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from agent_fake_master import FakeMaster, cgroups_available, shell_task
from harness import eventually_async, host_pid

from agora.agent import AgentConfig, AgentDaemon, native_wrapper
from agora.v1 import common_pb2 as S

FW = "fw-1"


pytestmark = pytest.mark.skipif(
    not cgroups_available(), reason="this host does not let the agent create cgroups"
)


@pytest.fixture(params=["c", "c-plain", "python"])
async def cluster(request, tmp_path, monkeypatch):
    """An agent whose tasks get cgroups, spawning the C task wrapper (its tasks in namespaces of
    their own, the default as root, then without), then the Python one (the reference, which
    steps into the task's cgroups and back out around the spawn, and makes no namespaces)."""
    if request.param == "python":
        monkeypatch.setenv(native_wrapper.ENV_SWITCH, "0")
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    config = AgentConfig(master=master.address, port=0, work_dir=tmp_path / "a")
    if request.param == "c-plain":
        config.task_namespaces = False
    daemon = AgentDaemon(config)
    await daemon.start()
    await eventually_async(lambda: master.connected, message="registration")
    yield master, daemon
    await daemon.stop(kill_tasks=True)
    await master.stop()


async def test_task_runs_in_a_cgroup_with_its_memory_limit(cluster):
    master, daemon = cluster
    master.run_task(
        FW, shell_task("mem", "cat /proc/self/cgroup; while [ ! -e go ]; do sleep 0.05; done")
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("mem"))
    run = daemon.tasks.find(FW, "mem")
    assert run.record.cgroups and all(run.record.run_id in c for c in run.record.cgroups)
    limits = {}
    for cgroup in map(Path, run.record.cgroups):
        for name in ("memory.limit_in_bytes", "memory.max"):
            if (cgroup / name).exists():
                limits[name] = int((cgroup / name).read_text())
    assert list(limits.values()) == [32 * 1024 * 1024]  # shell_task asks for mem:32
    # The task is inside; its wrapper (which waits for it and writes its exit status) is not,
    # so killing whatever is left in the cgroup never takes the wrapper with it.
    inside = set()
    for cgroup in map(Path, run.record.cgroups):
        inside |= {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
    assert run.wrapper.task_pid in inside
    assert run.wrapper.wrapper_pid not in inside
    # It is where it started, in the agent's own cgroups (the agent runs in this process).
    own = Path("/proc/self/cgroup").read_text()
    assert Path(f"/proc/{run.wrapper.wrapper_pid}/cgroup").read_text() == own
    cgroups = list(run.record.cgroups)
    (run.sandbox / "go").touch()
    assert (await eventually_async(lambda: master.terminal("mem"))).state == S.TASK_FINISHED
    assert run.record.run_id in (run.sandbox / "stdout").read_text()
    # Kept, empty, for the agent's next task; the ended run no longer names them.
    assert run.record.cgroups == [] and all(_procs(c) == set() for c in cgroups)
    await daemon.stop(kill_tasks=True)
    assert not any(Path(c).exists() for c in cgroups)
    assert not any(Path(d).exists() for d in daemon.isolator.directories)


def _procs(cgroup: str) -> set[int]:
    return {int(p) for p in (Path(cgroup) / "cgroup.procs").read_text().split()}


async def test_what_a_task_starts_is_in_its_cgroups_too(cluster):
    """The wrappers move the task's one thread into each cgroup (on cgroup v1, "0" into
    `tasks`, which spares the kernel a grace period per launch), and a thread moved before the
    exec is the whole task: the processes it starts are inside with it, in every controller."""
    master, daemon = cluster
    master.run_task(
        FW,
        shell_task("tree", "sleep 30 & echo $! > child; while [ ! -e go ]; do sleep 0.05; done"),
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("tree"))
    run = daemon.tasks.find(FW, "tree")
    child_file = run.sandbox / "child"
    await eventually_async(lambda: child_file.exists() and child_file.read_text().strip())
    child = host_pid(run.wrapper.task_pid, int(child_file.read_text()))
    for cgroup in run.record.cgroups:
        assert {run.wrapper.task_pid, child} <= _procs(cgroup)
        assert run.wrapper.wrapper_pid not in _procs(cgroup)
    own = Path(f"/proc/{run.wrapper.task_pid}/cgroup").read_text()
    assert Path(f"/proc/{child}/cgroup").read_text() == own
    (run.sandbox / "go").touch()
    status = await eventually_async(lambda: master.terminal("tree"))
    assert status.state == S.TASK_FINISHED
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


def _limit(cgroups: list[str]) -> int:
    [limit] = [
        int((Path(c) / name).read_text())
        for c in cgroups
        for name in ("memory.limit_in_bytes", "memory.max")
        if (Path(c) / name).exists()
    ]
    return limit


def _cgroups_in(daemon: AgentDaemon) -> set[str]:
    return {str(p) for d in daemon.isolator.directories for p in Path(d).iterdir() if p.is_dir()}


async def _finish(master, daemon, task_id: str, command: str, mem: float = 32):
    task = shell_task(task_id, command)
    task.resources[1].scalar = mem
    master.run_task(FW, task)
    status = await eventually_async(lambda: master.terminal(task_id), timeout=30)
    return status, daemon.tasks.find(FW, task_id)


async def test_the_next_task_reuses_a_finished_tasks_cgroups_with_its_own_limits(cluster):
    master, daemon = cluster
    first, _ = await _finish(master, daemon, "first", "true")
    assert first.state == S.TASK_FINISHED
    [kept] = {Path(c).name for c in _cgroups_in(daemon)}
    # The next task asks for twice the memory: same cgroups, its own limit, and it is inside.
    task = shell_task(
        "second", "cat /proc/self/cgroup > mine; while [ ! -e go ]; do sleep 0.05; done"
    )
    task.resources[1].scalar = 64
    master.run_task(FW, task)
    await eventually_async(lambda: S.TASK_RUNNING in master.states("second"))
    run = daemon.tasks.find(FW, "second")
    assert {Path(c).name for c in run.record.cgroups} == {kept}
    assert _limit(run.record.cgroups) == 64 * 1024 * 1024
    assert all(run.wrapper.task_pid in _procs(c) for c in run.record.cgroups)
    (run.sandbox / "go").touch()
    assert (await eventually_async(lambda: master.terminal("second"))).state == S.TASK_FINISHED
    assert kept in (run.sandbox / "mine").read_text()


async def test_a_cgroup_left_holding_memory_is_removed_not_reused(cluster):
    master, daemon = cluster
    # Shared memory outlives the task (a file in /dev/shm) and stays charged to its cgroup:
    # the next task would not get its whole limit there. 8 MB: more than memory.stat's lag,
    # which is read as nothing.
    # In namespaces of its own the task's /dev/shm is its own and goes with it: nothing is left
    # charged, and its cgroups serve the next task.
    name = f"/dev/shm/agora-test-{id(daemon)}"
    try:
        status, run = await _finish(master, daemon, "shm", f"head -c 8000000 /dev/zero > {name}")
        assert status.state == S.TASK_FINISHED
        removed = not any(run.record.run_id in c for c in _cgroups_in(daemon))
        status, after = await _finish(master, daemon, "after", "cat /proc/self/cgroup")
        in_after = run.record.run_id in (after.sandbox / "stdout").read_text()
        if daemon.namespaces:
            assert not Path(name).exists() and not removed and in_after
        else:
            assert removed and after.record.run_id in (after.sandbox / "stdout").read_text()
    finally:
        Path(name).unlink(missing_ok=True)


async def test_kill_reaches_processes_that_left_the_process_group(cluster):
    master, daemon = cluster
    master.run_task(
        FW, shell_task("escape", "setsid sleep 300 & echo $! > escapee; sleep 300", grace=0.3)
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("escape"))
    run = daemon.tasks.find(FW, "escape")
    pid_file = run.sandbox / "escapee"
    inside = int(await eventually_async(lambda: pid_file.read_text().strip()))
    escapee = host_pid(run.wrapper.task_pid, inside)
    assert psutil.pid_exists(escapee)
    master.kill_task(FW, "escape")
    assert (await eventually_async(lambda: master.terminal("escape"))).state == S.TASK_KILLED

    def gone() -> bool:
        try:
            return psutil.Process(escapee).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually_async(gone, message="the escaped process killed")


async def test_a_task_over_its_memory_limit_fails_saying_so(cluster):
    master, daemon = cluster
    # Asks for mem:32 (shell_task) and takes 300 MB: the kernel's OOM killer ends it.
    hog = "python3 -c 'b = bytearray(300 * 1024 * 1024); b[::4096] = b\"1\" * len(b[::4096])'"
    master.run_task(FW, shell_task("hog", hog))
    status = await eventually_async(lambda: master.terminal("hog"), timeout=30)
    assert status.state == S.TASK_FAILED
    assert status.reason == "REASON_CONTAINER_LIMITATION_MEMORY"
    assert "memory limit of 32 MB exceeded" in status.message
    # Its cgroups count that OOM kill for good: removed, and the next task gets new ones (an
    # OOM kill counted there would be reported as its own).
    hog = daemon.tasks.find(FW, "hog").record.run_id
    assert not any(hog in c for c in _cgroups_in(daemon))
    status, after = await _finish(master, daemon, "after", "true")
    assert status.state == S.TASK_FINISHED
    assert any(after.record.run_id in c for c in _cgroups_in(daemon))


def _settings(cgroups: list[str]) -> dict[str, str]:
    """The limits these cgroups hold, by control file (v1's or v2's names)."""
    names = ("memory.limit_in_bytes", "cpu.shares", "cpu.cfs_quota_us")
    names += ("memory.max", "cpu.weight", "cpu.max")
    return {
        name: (Path(c) / name).read_text().strip()
        for c in cgroups
        for name in names
        if (Path(c) / name).exists()
    }


async def test_a_kept_cgroup_takes_each_tasks_own_limits_and_lifts_those_it_has_not(tmp_path):
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    config = AgentConfig(
        master=master.address, port=0, work_dir=tmp_path / "a", cpu_hard_limit=True
    )
    daemon = AgentDaemon(config)
    await daemon.start()
    try:
        await eventually_async(lambda: master.connected, message="registration")
        wait = "while [ ! -e go ]; do sleep 0.05; done"

        async def run(task_id: str, cpus: float | None, mem: float) -> list[str]:
            task = shell_task(task_id, wait)
            task.resources[1].scalar = mem
            if cpus is None:
                del task.resources[0]
            else:
                task.resources[0].scalar = cpus
            master.run_task(FW, task)
            await eventually_async(lambda: S.TASK_RUNNING in master.states(task_id))
            found = daemon.tasks.find(FW, task_id)
            cgroups, settings = list(found.record.cgroups), _settings(found.record.cgroups)
            (found.sandbox / "go").touch()
            await eventually_async(lambda: master.terminal(task_id))
            return cgroups, settings

        first, small = await run("small", 0.1, 32)
        second, big = await run("big", 0.5, 64)
        third, unbounded = await run("no-cpus", None, 48)
        assert first == second == third  # one set of cgroups, handed on
        if daemon.isolator.kind == "cgroup1":
            assert small == {
                "memory.limit_in_bytes": str(32 << 20),
                "cpu.shares": "102",
                "cpu.cfs_quota_us": "10000",
            }
            assert big == {
                "memory.limit_in_bytes": str(64 << 20),
                "cpu.shares": "512",
                "cpu.cfs_quota_us": "50000",
            }
            # No cpus asked: no CPU limit left over from the tasks before.
            assert unbounded == {
                "memory.limit_in_bytes": str(48 << 20),
                "cpu.shares": "1024",
                "cpu.cfs_quota_us": "-1",
            }
        else:
            assert big["memory.max"] == str(64 << 20) and big["cpu.max"] == "50000 100000"
            assert unbounded["memory.max"] == str(48 << 20)
            assert unbounded["cpu.max"] == "max 100000" and unbounded["cpu.weight"] == "100"
    finally:
        await daemon.stop(kill_tasks=True)
        await master.stop()


async def test_a_task_that_ends_while_no_agent_watches_leaves_no_cgroups(cluster, tmp_path):
    """The agent stopped, leaving its task running (as `agora agent` does on SIGTERM), but its
    process lives on (here: this test's): the task's wrapper removes the cgroups as it ends,
    which no agent will release. The next agent on the work dir watches its tasks again."""
    master, daemon = cluster
    task = shell_task("stays", "while [ ! -e go ]; do sleep 0.05; done")
    master.run_task(FW, task)
    await eventually_async(lambda: S.TASK_RUNNING in master.states("stays"))
    run = daemon.tasks.find(FW, "stays")
    cgroups = list(run.record.cgroups)
    try:
        await daemon.stop(kill_tasks=False)
        assert all(Path(c).exists() for c in cgroups)  # the task still runs in them
    finally:
        (run.sandbox / "go").touch()  # nobody else would end it
    await eventually_async(lambda: not any(Path(c).exists() for c in cgroups), message="removed")

    again = AgentDaemon(AgentConfig(master=master.address, port=0, work_dir=tmp_path / "a"))
    await again.start()
    try:
        await eventually_async(lambda: len(master.registrations) == 2 and master.connected)
        assert not again.work.unwatched.exists()
        status, after = await _finish(master, again, "after", "true")
        assert status.state == S.TASK_FINISHED
        # Watched: kept for the next task, not removed by its wrapper.
        assert any(after.record.run_id in c for c in _cgroups_in(again))
    finally:
        await again.stop(kill_tasks=True)
