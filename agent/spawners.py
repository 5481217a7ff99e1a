"""The Spawner protocol: one route to a running task wrapper; and the route of last resort.

A spawner starts a run's wrapper from a `LaunchSpec` and returns the wrapper's report on it
(agora.agent.wrapper_reports: Started or Refused). The agent's `Launcher` (agent/launcher.py)
chooses its spawners once, when it starts, from what the host offers, and keeps them in this
order of preference:

1. `CWrapperSpawner` (agent/direct_spawn.py): the agent posix_spawns the C wrapper itself
   and watches it through a pidfd until it reports. The cheapest (about 0.4 ms of CPU a
   task, no copy of the agent); only where the C wrapper was built (agent/native_wrapper.py)
   and the kernel has pidfds (Linux >= 5.3).
2. `ForkServerSpawner` (agent/fork_server.py): the launch goes down the pipe of a long-lived
   Python process started once (`python -m agora.agent.executor --serve`), which spawns the C
   wrapper where the agent cannot (no pidfds), else hands it to a Python wrapper it forked
   ahead of time. Always there: it takes what the C wrapper cannot be given.
3. `OneShotSpawner` (here): one `python -m agora.agent.executor RUN_DIR` per launch, which
   reads RUN_DIR/spec.json: 15-70 ms of CPU for a Python start-up, and the only route of an
   agent made without the fork server (TaskManager's use_launcher=False).

Each launch goes to the first spawner that takes it. A spawner declines a spec (returns None)
only when it cannot be given that spec at all: the C wrapper an environment with "=" in a name
or a NUL anywhere, or too big for a pipe (the agent's loop must not wait for the wrapper to
read it), and every spec once its binary is gone. A spawner that went down under a launch
(raises `SpawnerDown`: no process can report on the run any more) gets the launch again up to
`tries` times, after the run's files have been checked for what its wrapper did.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Protocol

from agora.agent.atomic_files import atomic_write_json
from agora.agent.launch_spec import LaunchSpec
from agora.agent.wrapper_reports import Refused, Started, parse_report

__all__ = ["REPORT_GRACE", "OneShotSpawner", "Spawner", "SpawnerDown", "WrapperDied"]

# After a wrapper dies, how long its report (written before it died, if at all) may take to
# come through the report pipe.
REPORT_GRACE = 1.0


class SpawnerDown(Exception):
    """The spawner's process ended before any wrapper reported on this run."""


class WrapperDied(Exception):
    """The wrapper handed this run ended without reporting on it."""


class Spawner(Protocol):
    """One route to a running task wrapper (see the order above)."""

    name: str
    # How many times a launch goes to this spawner when it went down under it.
    tries: int

    async def start(self) -> None:
        """Readies the route (idempotent); OSError if it cannot be used at all."""

    async def spawn(self, run_dir: Path, spec: LaunchSpec) -> Started | Refused | None:
        """Starts the run's wrapper; its report, or None when this route cannot take `spec`.
        Raises SpawnerDown or WrapperDied (above)."""

    async def stop(self) -> None:
        """Lets go of the route; the wrappers it started keep running."""


class OneShotSpawner:
    """`python -m agora.agent.executor RUN_DIR`, one process per launch: the last resort."""

    name = "one-shot"
    tries = 1

    async def start(self) -> None:
        pass

    async def spawn(self, run_dir: Path, spec: LaunchSpec) -> Started | Refused:
        # Not fsync'd: the wrapper reads it at once, and a machine crash ends the run anyway.
        atomic_write_json(run_dir / "spec.json", spec.to_wire(), durable=False)
        line, returncode = await _start_one_shot(run_dir)
        report = parse_report(line)
        if isinstance(report, Started | Refused):
            return report
        detail = (run_dir / "executor.log").read_text(errors="replace").strip().splitlines()
        return Refused(
            "the task wrapper failed to start"
            + (f": {detail[-1]}" if detail else f" (exit code {returncode})")
        )

    async def stop(self) -> None:
        pass


async def _start_one_shot(run_dir: Path) -> tuple[str, int | None]:
    """Runs `python -m agora.agent.executor RUN_DIR`: (its report line, the first exit code)."""
    with open(run_dir / "executor.log", "ab") as executor_log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agora.agent.executor",
            str(run_dir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=executor_log,
            start_new_session=True,
        )
        # EOF comes once the wrapper has started the command (or failed to) and let go of
        # the pipe; the intermediate process exits at once.
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            await _let_go(proc)
            raise
    return out.decode(errors="replace").strip(), proc.returncode


async def _let_go(proc: asyncio.subprocess.Process) -> None:
    """The agent is stopping mid-launch: closes our end of the wrapper's stdout now.

    Left open, the pipe outlives the event loop and warns (ResourceWarning) when collected.
    The wrapper carries on (a write to the closed pipe fails quietly) and the next agent
    re-attaches to it through wrapper.json. The intermediate process exits at once, so
    waiting for it is short; reaped, it lets asyncio close the process transport too.
    """
    # asyncio.subprocess.Process offers no public way to close one pipe.
    stdout = proc._transport.get_pipe_transport(1)  # type: ignore[attr-defined]  # noqa: SLF001
    if stdout is not None:
        stdout.close()
    await proc.wait()
