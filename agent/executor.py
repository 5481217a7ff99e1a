"""The task wrapper: `python -m agent.executor RUN_DIR`, one per task, outliving the agent.

The agent starts this in a new session. It forks once so that it is no longer the agent's child
(a restarted agent re-attaches to it through its pid), starts the task's command in a process
group of its own with stdout and stderr in the sandbox, waits for it, kills whatever the
command left behind in its group, and writes the exit status atomically to RUN_DIR/exit.json.
It reports "started TASK_PID WRAPPER_PID" or "error MESSAGE" on its stdout, then closes it, so
the agent learns the outcome of the launch without polling.

Files in RUN_DIR:
    spec.json     written by the agent: argv, cwd, env, stdout, stderr
    wrapper.json  written here once the command runs: wrapper_pid, wrapper_start, task_pid
    exit.json     written here at the end: {"exit_code": N} | {"signal": N} | {"error": "..."}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from agent.atomic_files import atomic_write_json


def _report(line: str) -> None:
    """Tells the agent (if it is still listening) and then lets go of the pipe."""
    try:
        os.write(1, (line + "\n").encode())
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _launch(run_dir: Path) -> int:
    spec = json.loads((run_dir / "spec.json").read_text())
    cgroups = spec.get("cgroups", [])

    def join_cgroups() -> None:
        # Runs in the child between fork and exec: everything the task forks stays inside.
        for path in cgroups:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    try:
        with open(spec["stdout"], "ab") as out, open(spec["stderr"], "ab") as err:
            proc = subprocess.Popen(
                spec["argv"],
                cwd=spec["cwd"],
                env=spec["env"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                close_fds=True,
                process_group=0,
                preexec_fn=join_cgroups if cgroups else None,
            )
    except OSError as e:
        what = e.strerror or str(e)
        if isinstance(e, FileNotFoundError):
            what = "command not found"
        elif isinstance(e, PermissionError):
            what = "permission denied"
        message = f"cannot run {spec['argv'][0]!r}: {what}"
        atomic_write_json(run_dir / "exit.json", {"error": message})
        _report(f"error {message}")
        return 1

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    me = psutil.Process()
    atomic_write_json(
        run_dir / "wrapper.json",
        {
            "wrapper_pid": me.pid,
            "wrapper_start": me.create_time(),
            "task_pid": proc.pid,
        },
    )
    _report(f"started {proc.pid} {me.pid}")

    returncode = proc.wait()
    # The command is gone; so must be anything it left running in its group.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    _empty_cgroups(cgroups)
    result = {"signal": -returncode} if returncode < 0 else {"exit_code": returncode}
    atomic_write_json(run_dir / "exit.json", result)
    return 0


def _empty_cgroups(cgroups: list[str]) -> None:
    """Kills what escaped the process group (setsid) but not the cgroup, then removes it."""
    for _ in range(50):
        pids = set()
        for path in cgroups:
            try:
                pids.update(int(p) for p in Path(path, "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
    for path in cgroups:
        try:
            os.rmdir(path)
        except OSError:
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m agent.executor RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    if os.fork() > 0:
        # The intermediate process: exit at once so the agent reaps it and the wrapper below
        # is re-parented, free to outlive the agent.
        os._exit(0)
    try:
        return _launch(run_dir)
    except BaseException as e:  # noqa: BLE001 - the agent must learn of any failure
        if not (run_dir / "exit.json").exists():
            atomic_write_json(run_dir / "exit.json", {"error": f"executor failed: {e!r}"})
        _report(f"error executor failed: {e!r}")
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv))
