"""The Launcher and its spawners (the C wrapper, the fork server): concurrent launches, launch
errors, detaching like the one-shot wrapper, a killed fork server replaced on the next launch."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from harness import eventually_async

from agora.agent import launcher, native_wrapper
from agora.agent.direct_spawn import CWrapperSpawner
from agora.agent.fork_server import ForkServerSpawner
from agora.agent.launcher import Launcher, LaunchError, Wrapper, start_wrapper
from agora.agent.wrapper_reports import Started


@pytest.fixture(params=["c", "python"])
async def agent_launcher(request, tmp_path: Path, monkeypatch):
    """A launcher spawning the C wrapper, then one forking Python wrappers (the reference)."""
    if request.param == "python":
        monkeypatch.setenv(native_wrapper.ENV_SWITCH, "0")
    z = Launcher(tmp_path / "launcher.log")
    await z.start()
    assert (z.native is not None) == (request.param == "c"), "this machine has a C compiler"
    yield z
    await z.stop()


@pytest.fixture
async def python_launcher(tmp_path: Path, monkeypatch):
    """A launcher forking Python wrappers ahead of time (spares)."""
    monkeypatch.setenv(native_wrapper.ENV_SWITCH, "0")
    z = Launcher(tmp_path / "launcher.log")
    await z.start()
    yield z
    await z.stop()


def new_run(tmp_path: Path, name: str) -> tuple[Path, Path]:
    run_dir = tmp_path / "runs" / name
    sandbox = tmp_path / "sandboxes" / name
    run_dir.mkdir(parents=True)
    sandbox.mkdir(parents=True)
    return run_dir, sandbox


USAGE_KEYS = ("cpu_user", "cpu_system", "max_rss_kb")


async def finished(wrapper: Wrapper, run_dir: Path) -> dict | None:
    """How the command ended, as exit.json says (without what it used: see the usage test)."""
    await asyncio.wait_for(wrapper.wait(), 30)
    result = launcher.read_exit(run_dir)
    return {k: v for k, v in result.items() if k not in USAGE_KEYS} if result else result


async def test_the_wrapper_records_what_the_command_used(tmp_path, agent_launcher):
    """CPU seconds and peak memory for accounting (`agora job history`), from the processes
    the wrapper waited for: here a child that holds 64 MB and spins for a moment."""
    run_dir, sandbox = new_run(tmp_path, "used")
    script = (
        "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); "
        "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    )
    wrapper = await start_wrapper(
        run_dir, [sys.executable, "-c", script], dict(os.environ), sandbox, launcher=agent_launcher
    )
    await asyncio.wait_for(wrapper.wait(), 30)
    usage = launcher.end_usage(launcher.read_exit(run_dir))
    assert usage is not None
    assert usage.cpu_user_seconds + usage.cpu_system_seconds >= 0.3
    assert usage.mem_peak_bytes >= 64 << 20


def pipes_of(pid: int) -> set[str]:
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            held.add(target)
    return held


async def test_concurrent_launches_each_get_their_own_pid_and_exit_code(agent_launcher, tmp_path):
    runs = [new_run(tmp_path, f"run-{i}") for i in range(24)]

    async def one(i: int) -> tuple[Wrapper, Path, Path]:
        run_dir, sandbox = runs[i]
        # $$ of a directly exec'd sh is the task's pid; the exit code names the run.
        argv = ["/bin/sh", "-c", f"echo $$; exit {i}"]
        wrapper = await start_wrapper(
            run_dir, argv, dict(os.environ), sandbox, launcher=agent_launcher
        )
        return wrapper, run_dir, sandbox

    started = await asyncio.gather(*(one(i) for i in range(len(runs))))
    assert len({w.task_pid for w, _, _ in started}) == len(runs)
    for i, (wrapper, run_dir, sandbox) in enumerate(started):
        assert await finished(wrapper, run_dir) == {"exit_code": i}
        assert (sandbox / "stdout").read_text().strip() == str(wrapper.task_pid)
        assert Wrapper.load(run_dir) == wrapper


async def test_a_command_that_cannot_start_is_a_launch_error(agent_launcher, tmp_path):
    run_dir, sandbox = new_run(tmp_path, "missing")
    with pytest.raises(LaunchError, match="command not found"):
        await start_wrapper(run_dir, ["/no/such/command"], {}, sandbox, launcher=agent_launcher)
    assert "error" in launcher.read_exit(run_dir)
    # The launcher carries on.
    run_dir, sandbox = new_run(tmp_path, "after")
    wrapper = await start_wrapper(
        run_dir, ["true"], dict(os.environ), sandbox, launcher=agent_launcher
    )
    assert await finished(wrapper, run_dir) == {"exit_code": 0}


async def test_the_wrapper_detaches_and_holds_no_launcher_pipe(agent_launcher, tmp_path):
    run_dir, sandbox = new_run(tmp_path, "sleeper")
    wrapper = await start_wrapper(
        run_dir, ["sleep", "30"], dict(os.environ), sandbox, launcher=agent_launcher
    )
    try:
        proc = psutil.Process(wrapper.wrapper_pid)
        # A C wrapper is spawned by the agent itself (agent/direct_spawn.py), a Python one is
        # forked by the launcher; either way it has a session of its own.
        spawner = os.getpid() if agent_launcher.native else agent_launcher.pid
        assert proc.ppid() == spawner
        assert os.getsid(wrapper.wrapper_pid) not in (os.getsid(0), os.getsid(agent_launcher.pid))
        assert os.getpgid(wrapper.task_pid) == wrapper.task_pid
        assert wrapper.alive()
        launcher_pipes = pipes_of(agent_launcher.pid) | pipes_of(os.getpid())
        assert launcher_pipes, "the launcher talks to the agent over pipes"
        # The task never had them; the wrapper lets go of the report pipe right after its report.
        assert not (pipes_of(wrapper.task_pid) & launcher_pipes)
        await eventually_async(
            lambda: not (pipes_of(wrapper.wrapper_pid) & launcher_pipes),
            timeout=10,
            message="the wrapper closed the launcher's pipe",
        )
        # The task outlives the launcher and its spawner (and so the agent that owns them).
        await agent_launcher.stop()
        assert wrapper.alive()
    finally:
        wrapper.signal_group(signal.SIGKILL)
    assert await finished(wrapper, run_dir) == {"signal": signal.SIGKILL}


async def test_a_wrapper_outlives_the_agent_that_spawned_it(tmp_path):
    """An agent that spawns C wrappers itself dies: the wrapper, re-parented, runs on and
    records the task's end."""
    script = f"""
import asyncio, os, sys
sys.path[:0] = {sys.path!r}
from pathlib import Path
from agora.agent.launcher import Launcher, start_wrapper
async def main():
    z = Launcher(Path({str(tmp_path / "launcher.log")!r}))
    await z.start()
    assert z.native is not None
    w = await start_wrapper(Path({str(tmp_path / "runs" / "orphan")!r}),
        ["/bin/sh", "-c", "sleep 1; exit 7"], dict(os.environ),
        Path({str(tmp_path / "sandboxes" / "orphan")!r}), launcher=z)
    print(w.wrapper_pid, flush=True)
    os._exit(0)  # no clean-up: as if killed
asyncio.run(main())
"""
    run_dir, _ = new_run(tmp_path, "orphan")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The wrapper writes wrapper.json just after its report.
    await eventually_async(
        lambda: Wrapper.load(run_dir) is not None, timeout=10, message="wrapper.json"
    )
    wrapper = Wrapper.load(run_dir)
    assert wrapper is not None and wrapper.wrapper_pid == int(done.stdout)
    assert await finished(wrapper, run_dir) == {"exit_code": 7}


async def test_ended_wrappers_leave_no_zombie_behind(agent_launcher, tmp_path):
    run_dir, sandbox = new_run(tmp_path, "quick")
    wrapper = await start_wrapper(
        run_dir, ["true"], dict(os.environ), sandbox, launcher=agent_launcher
    )
    assert await finished(wrapper, run_dir) == {"exit_code": 0}

    def reaped() -> bool:
        try:
            return psutil.Process(wrapper.wrapper_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually_async(reaped, timeout=10, message="the ended wrapper was reaped")


async def test_a_killed_launcher_is_replaced_on_the_next_launch(agent_launcher, tmp_path):
    run_dir, sandbox = new_run(tmp_path, "first")
    wrapper = await start_wrapper(
        run_dir, ["true"], dict(os.environ), sandbox, launcher=agent_launcher
    )
    assert await finished(wrapper, run_dir) == {"exit_code": 0}
    old = agent_launcher.pid
    os.kill(old, signal.SIGKILL)
    await eventually_async(
        lambda: not psutil.pid_exists(old) or psutil.Process(old).status() == "zombie",
        timeout=10,
        message="the launcher died",
    )
    run_dir, sandbox = new_run(tmp_path, "second")
    wrapper = await start_wrapper(
        run_dir, ["/bin/sh", "-c", "exit 3"], dict(os.environ), sandbox, launcher=agent_launcher
    )
    assert await finished(wrapper, run_dir) == {"exit_code": 3}
    if agent_launcher.native:
        # C wrappers are spawned without the launcher; a launch that needs it (a spec only
        # the Python wrapper takes, here read from spec.json) starts a new one.
        assert agent_launcher.pid == old
        run_dir, sandbox = new_run(tmp_path, "third")
        spec = {"argv": ["/bin/sh", "-c", "exit 4"], "env": dict(os.environ),
                "cwd": str(sandbox), "stdout": str(sandbox / "stdout"),
                "stderr": str(sandbox / "stderr"), "cgroups": [], "user": None}  # fmt: skip
        (run_dir / "spec.json").write_text(json.dumps(spec))
        fork_server = agent_launcher.spawner(ForkServerSpawner)
        assert fork_server is not None
        report = await asyncio.wait_for(fork_server.spawn(run_dir, None), 30)
        assert isinstance(report, Started), report
        # The report comes before wrapper.json is written: the wrapper is in it.
        assert await finished(Wrapper.reported(report), run_dir) == {"exit_code": 4}
    assert agent_launcher.pid != old


async def test_launches_in_flight_when_the_launcher_dies_still_end_cleanly(
    agent_launcher, tmp_path
):
    runs = [new_run(tmp_path, f"r{i}") for i in range(8)]
    launches = [
        asyncio.create_task(
            start_wrapper(run_dir, ["true"], dict(os.environ), sandbox, launcher=agent_launcher)
        )
        for run_dir, sandbox in runs
    ]
    await asyncio.sleep(0)  # the launch lines are written; kill the launcher among them
    os.kill(agent_launcher.pid, signal.SIGKILL)
    # Each launch either started (through the launcher or the one-shot fallback) or failed
    # as a launch error; none hangs and every started one ends with its exit code.
    for task, (run_dir, _) in zip(launches, runs, strict=True):
        try:
            wrapper = await asyncio.wait_for(task, 60)
        except LaunchError:
            continue
        assert await finished(wrapper, run_dir) == {"exit_code": 0}


def spares_of(launcher_pid: int) -> list[int]:
    """The launcher's children that have not been handed a launch yet (no task child)."""
    return [
        c.pid
        for c in psutil.Process(launcher_pid).children()
        if c.status() != psutil.STATUS_ZOMBIE and not c.children()
    ]


async def test_a_launch_goes_to_a_wrapper_forked_ahead_of_time(python_launcher, tmp_path):
    await eventually_async(lambda: len(spares_of(python_launcher.pid)) == 1, timeout=10)
    [spare] = spares_of(python_launcher.pid)
    run_dir, sandbox = new_run(tmp_path, "sleeper")
    wrapper = await start_wrapper(
        run_dir, ["sleep", "30"], dict(os.environ), sandbox, launcher=python_launcher
    )
    try:
        assert wrapper.wrapper_pid == spare
        # The spec travelled on the pipe: nothing with the task's environment on disk.
        assert not (run_dir / "spec.json").exists()
        await eventually_async(
            lambda: [p for p in spares_of(python_launcher.pid) if p != wrapper.wrapper_pid] != [],
            timeout=10,
            message="a new spare is forked",
        )
    finally:
        wrapper.signal_group(signal.SIGKILL)
    assert await finished(wrapper, run_dir) == {"signal": signal.SIGKILL}


async def test_a_dead_spare_is_replaced_and_the_launch_still_runs(python_launcher, tmp_path):
    await eventually_async(lambda: len(spares_of(python_launcher.pid)) == 1, timeout=10)
    [spare] = spares_of(python_launcher.pid)
    os.kill(spare, signal.SIGKILL)
    await eventually_async(lambda: spare not in spares_of(python_launcher.pid), timeout=10)
    run_dir, sandbox = new_run(tmp_path, "after-dead-spare")
    wrapper = await start_wrapper(
        run_dir, ["/bin/sh", "-c", "exit 5"], dict(os.environ), sandbox, launcher=python_launcher
    )
    assert wrapper.wrapper_pid != spare
    assert await finished(wrapper, run_dir) == {"exit_code": 5}


async def test_the_waiting_spare_exits_with_the_launcher(python_launcher, tmp_path):
    await eventually_async(lambda: len(spares_of(python_launcher.pid)) == 1, timeout=10)
    [spare] = spares_of(python_launcher.pid)
    await python_launcher.stop()

    def gone() -> bool:
        try:
            return psutil.Process(spare).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually_async(gone, timeout=10, message="the spare exited")


async def test_a_wrapper_killed_before_it_reports_fails_the_launch_instead_of_hanging(
    python_launcher, tmp_path
):
    await eventually_async(lambda: len(spares_of(python_launcher.pid)) == 1, timeout=10)
    [spare] = spares_of(python_launcher.pid)
    # Stopped, the spare takes the launch line into its pipe but cannot act on it.
    os.kill(spare, signal.SIGSTOP)
    run_dir, sandbox = new_run(tmp_path, "killed-before-report")
    launch = asyncio.create_task(
        start_wrapper(run_dir, ["true"], dict(os.environ), sandbox, launcher=python_launcher)
    )
    # Once the launcher forked the next spare, it has handed this launch to the stopped one.
    await eventually_async(
        lambda: len(spares_of(python_launcher.pid)) == 2, timeout=10, message="launch handed"
    )
    os.kill(spare, signal.SIGKILL)
    with pytest.raises(LaunchError, match="ended without reporting"):
        await asyncio.wait_for(launch, 60)
    # The launcher lives on and serves the next launch.
    run_dir, sandbox = new_run(tmp_path, "next")
    wrapper = await start_wrapper(
        run_dir, ["true"], dict(os.environ), sandbox, launcher=python_launcher
    )
    assert await finished(wrapper, run_dir) == {"exit_code": 0}


PRELOAD_SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen(MARKS, "a");
    if (f) { fprintf(f, "%d\n", getpid()); fclose(f); }
}
"""


async def test_the_tasks_environment_reaches_the_task_and_not_its_wrapper(agent_launcher, tmp_path):
    """A framework chooses a task's environment, LD_PRELOAD included: the wrapper (root,
    usually) must not load what it names; the task does."""
    marks = tmp_path / "marks"
    source = tmp_path / "mark.c"
    source.write_text(PRELOAD_SOURCE)
    library = tmp_path / "mark.so"
    built = await asyncio.to_thread(
        subprocess.run,
        ["cc", "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", str(library), str(source)],
        capture_output=True,
    )
    assert built.returncode == 0, built.stderr
    run_dir, sandbox = new_run(tmp_path, "preload")
    env = dict(os.environ, LD_PRELOAD=str(library), SECRET_FOR_THE_TASK="s3")
    argv = ["/bin/sh", "-c", "echo $SECRET_FOR_THE_TASK"]
    wrapper = await start_wrapper(run_dir, argv, env, sandbox, launcher=agent_launcher)
    assert await finished(wrapper, run_dir) == {"exit_code": 0}
    assert (sandbox / "stdout").read_text() == "s3\n"
    loaded = {int(p) for p in marks.read_text().split()}
    assert wrapper.task_pid in loaded
    assert wrapper.wrapper_pid not in loaded


async def test_the_tasks_output_is_never_written_through_a_symlink(agent_launcher, tmp_path):
    """A sandbox belongs to its task's user, who could point stdout at any file."""
    target = tmp_path / "precious"
    target.write_text("keep\n")
    run_dir, sandbox = new_run(tmp_path, "symlinked")
    (sandbox / "stdout").symlink_to(target)
    with pytest.raises(LaunchError, match="cannot run"):
        await start_wrapper(run_dir, ["echo", "overwritten"], dict(os.environ), sandbox,
                            launcher=agent_launcher)  # fmt: skip
    assert target.read_text() == "keep\n"


async def test_a_script_without_an_interpreter_line_is_an_exec_format_error(
    agent_launcher, tmp_path
):
    script = tmp_path / "script"
    script.write_text("echo ran anyway\n")
    script.chmod(0o755)
    run_dir, sandbox = new_run(tmp_path, "no-shebang")
    with pytest.raises(LaunchError, match="cannot run"):
        await start_wrapper(
            run_dir, [str(script)], dict(os.environ), sandbox, launcher=agent_launcher
        )
    assert not (sandbox / "stdout").exists() or "ran anyway" not in (sandbox / "stdout").read_text()


async def test_a_c_wrapper_that_cannot_be_spawned_gives_way_to_the_python_one(tmp_path):
    z = Launcher(tmp_path / "launcher.log")
    z.native, z._native_checked = str(tmp_path / "gone"), True  # as after a cleaned cache
    await z.start()
    try:
        for name in ("first", "second"):
            run_dir, sandbox = new_run(tmp_path, name)
            wrapper = await start_wrapper(run_dir, ["true"], dict(os.environ), sandbox, launcher=z)
            assert await finished(wrapper, run_dir) == {"exit_code": 0}
    finally:
        await z.stop()
    assert "cannot be spawned" in (tmp_path / "launcher.log").read_text()


async def test_a_fifo_in_place_of_the_tasks_stdout_fails_the_launch_without_hanging(
    agent_launcher, tmp_path
):
    run_dir, sandbox = new_run(tmp_path, "fifo")
    os.mkfifo(sandbox / "stdout")
    with pytest.raises(LaunchError, match="cannot run"):
        await asyncio.wait_for(
            start_wrapper(run_dir, ["true"], dict(os.environ), sandbox, launcher=agent_launcher), 20
        )


def test_the_c_wrapper_refuses_an_environment_cut_short(tmp_path):
    """A launcher that dies while writing the task's environment must not start the task with
    part of it."""
    wrapper = native_wrapper.wrapper_path(tmp_path / "bin")
    assert wrapper is not None, "this machine has a C compiler"
    run_dir, sandbox = new_run(tmp_path, "cut")
    (run_dir / "exit.json").write_text("{}".ljust(512))
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"PATH=/usr/bin:/bin\0HOME=/")  # no end, and the writer goes away
    os.close(write_fd)
    argv = [wrapper, str(run_dir), str(sandbox / "stdout"), str(sandbox / "stderr"),
            str(sandbox), "-", "0", "--", "/bin/sh", "-c", "echo started > ran"]  # fmt: skip
    done = subprocess.run(
        argv,
        env={},
        pass_fds=(read_fd,),
        capture_output=True,
        preexec_fn=lambda: os.dup2(read_fd, 3),
    )
    os.close(read_fd)
    assert done.returncode == 1
    assert b"cannot read its environment" in done.stdout
    assert "cannot read its environment" in launcher.read_exit(run_dir)["error"]
    assert not (sandbox / "ran").exists()


def test_the_c_wrapper_is_built_the_usual_way_where_static_linking_fails(tmp_path, monkeypatch):
    """A system without a static C library still gets the C wrapper, dynamically linked."""
    if os.geteuid() == 0:
        monkeypatch.setattr(native_wrapper, "SHARED_DIR", tmp_path / "shared")
    broken_static = ("-O2", "-static", "-l:no-such-library.a")
    monkeypatch.setattr(native_wrapper, "BUILDS", (broken_static, ("-O2",)))
    monkeypatch.setattr(native_wrapper, "MUSL_GCC", "no-such-musl-gcc")
    wrapper = native_wrapper.wrapper_path(tmp_path / "bin")
    assert wrapper is not None
    done = subprocess.run([wrapper], capture_output=True, env={})
    assert done.returncode == 2 and b"usage" in done.stderr
    assert b"libc.so" in subprocess.run(["ldd", wrapper], capture_output=True).stdout


def test_the_c_wrapper_is_linked_statically_where_the_c_library_allows_it(tmp_path):
    """Each task's exec then maps no shared library (agent/native_wrapper.py BUILDS)."""
    wrapper = native_wrapper.wrapper_path(tmp_path / "bin")
    assert wrapper is not None, "this machine has a C compiler"
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler is not None
    archive = subprocess.run(
        [compiler, "-print-file-name=libc.a"], capture_output=True, text=True
    ).stdout.strip()
    linked = subprocess.run(["ldd", wrapper], capture_output=True).stdout
    if os.path.isabs(archive) and os.path.exists(archive) or shutil.which("musl-gcc"):
        assert b"libc.so" not in linked, linked
    else:  # no static C library here: built the usual way
        assert b"libc.so" in linked, linked


def test_the_c_wrapper_is_built_with_musl_where_it_is_installed(tmp_path):
    """musl's start-up costs a task a third of glibc's (agent/native_wrapper.py MUSL_GCC);
    `make system-deps` installs it. The binary is static and position-independent."""
    assert shutil.which("musl-gcc"), "make system-deps installs musl-tools"
    wrapper = native_wrapper.wrapper_path(tmp_path / "bin")
    assert wrapper is not None
    image = Path(wrapper).read_bytes()
    assert b"glibc.malloc" not in image, "glibc's tunables are linked in: not a musl build"
    header = subprocess.run(["readelf", "-h", "-l", wrapper], capture_output=True, text=True)
    assert "DYN (Position-Independent Executable" in header.stdout, header.stdout
    assert "INTERP" not in header.stdout, "it must need no dynamic loader"
    done = subprocess.run([wrapper], capture_output=True, env={})
    assert done.returncode == 2 and b"usage" in done.stderr


async def test_a_c_wrapper_that_ends_without_reporting_fails_its_launch(tmp_path):
    """The agent watches each wrapper it spawned until it reports: one that ends first (here a
    stand-in that exits at once) fails the launch instead of leaving it waiting."""
    z = Launcher(tmp_path / "launcher.log")
    await z.start()
    try:
        c_wrappers = z.spawner(CWrapperSpawner)
        assert c_wrappers is not None, "this machine has a C compiler and pidfds"
        c_wrappers.wrapper = shutil.which("true") or "/bin/true"
        run_dir, sandbox = new_run(tmp_path, "silent")
        with pytest.raises(LaunchError, match="ended without reporting"):
            await asyncio.wait_for(
                start_wrapper(run_dir, ["true"], dict(os.environ), sandbox, launcher=z), 20
            )
    finally:
        await z.stop()


async def test_a_c_wrapper_the_agent_cannot_spawn_gives_way_to_the_launcher(tmp_path):
    z = Launcher(tmp_path / "launcher.log")
    await z.start()
    try:
        c_wrappers = z.spawner(CWrapperSpawner)
        assert c_wrappers is not None, "this machine has a C compiler and pidfds"
        c_wrappers.wrapper = str(tmp_path / "gone")  # as after a cleaned cache
        run_dir, sandbox = new_run(tmp_path, "first")
        wrapper = await start_wrapper(
            run_dir, ["sleep", "30"], dict(os.environ), sandbox, launcher=z
        )
        assert c_wrappers.broken is not None
        assert psutil.Process(wrapper.wrapper_pid).ppid() == z.pid
        wrapper.signal_group(signal.SIGKILL)
        assert await finished(wrapper, run_dir) == {"signal": signal.SIGKILL}
    finally:
        await z.stop()


async def test_without_pidfds_the_launcher_spawns_the_c_wrapper(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "usable", lambda: False)
    z = Launcher(tmp_path / "launcher.log")
    await z.start()
    try:
        assert z.native is not None and z.spawner(CWrapperSpawner) is None
        run_dir, sandbox = new_run(tmp_path, "first")
        wrapper = await start_wrapper(
            run_dir, ["sleep", "30"], dict(os.environ), sandbox, launcher=z
        )
        proc = psutil.Process(wrapper.wrapper_pid)
        assert proc.ppid() == z.pid and "agora-task-wrapper" in proc.name()
        wrapper.signal_group(signal.SIGKILL)
        assert await finished(wrapper, run_dir) == {"signal": signal.SIGKILL}
    finally:
        await z.stop()


async def test_an_environment_too_big_for_a_pipe_goes_through_the_launcher(
    agent_launcher, tmp_path
):
    """The agent's loop must not wait for a wrapper to read the task's environment: one bigger
    than a pipe can hold at once (pipe-max-size, 1 MiB by default) goes to the launcher, and
    reaches the task whole."""
    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    chunk = 100 * 1024  # under the kernel's 128 KiB limit for one environment string
    env = dict(os.environ)
    env.update({f"BIG{i}": "x" * chunk for i in range(limit // chunk + 2)})
    run_dir, sandbox = new_run(tmp_path, "big-env")
    wrapper = await start_wrapper(
        run_dir,
        ["/bin/sh", "-c", 'printf %s "$BIG0" | wc -c > size; sleep 30'],
        env,
        sandbox,
        launcher=agent_launcher,
    )
    try:
        assert psutil.Process(wrapper.wrapper_pid).ppid() == agent_launcher.pid
        await eventually_async(
            lambda: (sandbox / "size").exists() and (sandbox / "size").read_text().strip(),
            timeout=10,
            message="the task wrote its variable's size",
        )
        assert int((sandbox / "size").read_text()) == chunk
    finally:
        wrapper.signal_group(signal.SIGKILL)
    await finished(wrapper, run_dir)


@pytest.mark.parametrize(
    ("c_wrapper", "pidfds", "order"),
    [
        (True, True, ["c-wrapper", "fork-server", "one-shot"]),
        (True, False, ["fork-server", "one-shot"]),  # the fork server spawns the C wrapper
        (False, True, ["fork-server", "one-shot"]),  # it forks Python wrappers
    ],
    ids=["c-wrapper-and-pidfds", "no-pidfds", "no-c-wrapper"],
)
async def test_the_spawners_are_chosen_once_in_one_order(
    tmp_path, monkeypatch, c_wrapper, pidfds, order
):
    monkeypatch.setattr(launcher, "usable", lambda: pidfds)
    chosen = await launcher.choose_spawners(
        "/bin/true" if c_wrapper else None, tmp_path / "launcher.log"
    )
    try:
        assert [s.name for s in chosen] == order
        fork_server = next(s for s in chosen if isinstance(s, ForkServerSpawner))
        assert fork_server.c_wrapper == ("/bin/true" if c_wrapper else None)
    finally:
        for spawner in chosen:
            await spawner.stop()
