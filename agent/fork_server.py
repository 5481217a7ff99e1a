"""The fork server's route to a task wrapper (see agent/spawners.py for the order of routes).

The server (agent/fork_server_process.py, run as `python -m agora.agent.executor --serve`)
exists to fork Python wrappers from a small process rather than from the agent, ahead of time,
so a launch costs neither a Python start-up nor a fork on its way; where the agent cannot watch
the C wrappers it would spawn (no pidfds), the server spawns them instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import structlog

from agora.agent.launch_spec import LaunchSpec
from agora.agent.proc_stat import is_running
from agora.agent.spawners import REPORT_GRACE, SpawnerDown, WrapperDied
from agora.agent.wrapper_reports import Handed, Refused, Started, parse_line

__all__ = ["ForkServerSpawner"]

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.25


class ForkServerSpawner:
    """The fork server's route: `python -m agora.agent.executor --serve`, the agent's child
    started once, forks Python wrappers ahead of time (spares) and hands each launch to one;
    given the C wrapper (`--native`), it spawns that instead, for the agent that cannot.

    One line per launch goes to its stdin (the run dir, a tab, the spec's wire form); one
    reader task reads the reports that the wrappers write to the shared stdout pipe and
    resolves each run's future. A dead fork server is restarted by the next launch. Its
    in-flight launches fail with SpawnerDown once its stdout reaches EOF, i.e. once no process
    (the server or a wrapper it forked) can still report on them, so the caller may decide
    from the run dir's files.
    """

    name = "fork-server"
    # A second try goes to a restarted server: the first may have died before reading the line.
    tries = 2

    def __init__(self, c_wrapper: str | None = None, log_path: Path | None = None) -> None:
        self.c_wrapper = c_wrapper  # None: Python wrappers only
        self._log_path = log_path
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[str, _Launch] = {}
        # Every server process not yet reaped, with its reader task.
        self._generations: list[tuple[asyncio.subprocess.Process, asyncio.Task]] = []
        self._starting = asyncio.Lock()
        self._stopped = False

    def _usable(self) -> bool:
        proc = self._proc
        return (
            proc is not None
            and proc.returncode is None
            and proc.stdin is not None
            and not proc.stdin.is_closing()
        )

    async def start(self) -> None:
        """Starts the server process unless one is running."""
        async with self._starting:
            if self._stopped or self._usable():
                return
            if self._proc is not None:
                log.warning("the task launcher died; starting a new one")
            native = ["--native", self.c_wrapper] if self.c_wrapper else []
            log_file = open(self._log_path, "ab") if self._log_path else None
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "agora.agent.executor",
                    "--serve",
                    *native,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log_file if log_file is not None else asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                )
            finally:
                if log_file is not None:
                    log_file.close()
            pending: dict[str, _Launch] = {}
            reader = asyncio.create_task(self._read(proc, pending), name="task-launcher-reader")
            self._proc, self._pending = proc, pending
            self._generations.append((proc, reader))

    async def spawn(self, run_dir: Path, spec: LaunchSpec | None) -> Started | Refused:
        """The wrapper's report on run_dir; the spec goes down the server's pipe with the run
        dir (None: the wrapper reads RUN_DIR/spec.json). Raises SpawnerDown, or WrapperDied
        when the wrapper handed the run died before reporting."""
        await self.start()
        if not self._usable():
            raise SpawnerDown("the task launcher is not running")
        assert self._proc is not None and self._proc.stdin is not None
        launch = _Launch(asyncio.get_running_loop())
        pending = self._pending
        pending[run_dir.name] = launch
        try:
            line = os.fsencode(str(run_dir))
            if spec is not None:
                # JSON holds no raw newline or tab: one line, split at the first tab.
                line += b"\t" + json.dumps(spec.to_wire(), separators=(",", ":")).encode()
            self._proc.stdin.write(line + b"\n")
            first: set[asyncio.Future[Started | Refused] | asyncio.Future[Handed]] = {
                launch.report,
                launch.handed,
            }
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if not launch.report.done():
                await _report_or_death(launch.report, launch.handed.result())
            return launch.report.result()
        finally:
            launch.handed.cancel()
            if pending.get(run_dir.name) is launch:
                del pending[run_dir.name]

    async def _read(self, proc: asyncio.subprocess.Process, pending: dict[str, _Launch]) -> None:
        assert proc.stdout is not None
        try:
            while line := await proc.stdout.readline():
                run_id, report = parse_line(line)
                launch = pending.get(run_id)
                if launch is None:
                    continue  # a "handed" line after the wrapper's own report
                if isinstance(report, Handed):
                    if not launch.handed.done():
                        launch.handed.set_result(report)
                    continue
                del pending[run_id]
                if not launch.report.done():
                    launch.report.set_result(report or Refused("the task wrapper failed to start"))
        except asyncio.CancelledError:
            for launch in pending.values():
                launch.report.cancel()
            raise
        except (OSError, ValueError) as e:
            log.warning("cannot read the task launcher's reports", error=str(e))
        for launch in pending.values():
            if not launch.report.done():
                launch.report.set_exception(SpawnerDown("the task launcher ended before reporting"))
        pending.clear()
        await self._reap(proc)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        if proc.stdin is not None:
            proc.stdin.close()
        # asyncio.subprocess.Process offers no public way to close one pipe.
        stdout = proc._transport.get_pipe_transport(1)  # type: ignore[attr-defined]  # noqa: SLF001
        if stdout is not None:
            stdout.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        self._generations = [g for g in self._generations if g[0] is not proc]

    async def stop(self) -> None:
        """Ends the server (it exits when its stdin closes); wrappers keep running."""
        self._stopped = True
        generations = list(self._generations)
        for _, reader in generations:
            reader.cancel()
        await asyncio.gather(*(r for _, r in generations), return_exceptions=True)
        for proc, _ in generations:
            await self._reap(proc)
        self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None


class _Launch:
    """One launch in flight: the wrapper's report, and the pid of the wrapper handed it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.report: asyncio.Future[Started | Refused] = loop.create_future()
        # The wrapper that took the run (the launcher's "handed" line).
        self.handed: asyncio.Future[Handed] = loop.create_future()


async def _report_or_death(report: asyncio.Future[Started | Refused], handed: Handed) -> None:
    """Waits for the report; raises WrapperDied if the wrapper ends without one.

    Without this a wrapper killed between taking the run and reporting (the OOM killer, an
    operator) would leave the launch waiting for ever while the launcher lives on.
    """
    loop = asyncio.get_running_loop()
    wrapper_pid, ticks = handed
    try:
        fd = os.pidfd_open(wrapper_pid)
    except ProcessLookupError:
        fd = None
    except OSError:
        fd = None
        # No pidfd (Linux < 5.3, or no fd to spare): poll instead.
        while not report.done() and is_running(wrapper_pid, ticks):
            await asyncio.wait({report}, timeout=POLL_SECONDS)
    try:
        # Checked after opening the pidfd: a pid already taken by another process means ours
        # is gone, and the pidfd would watch the wrong one.
        if fd is not None and is_running(wrapper_pid, ticks):
            died = loop.create_future()

            def on_exit() -> None:
                if not died.done():
                    died.set_result(None)

            loop.add_reader(fd, on_exit)
            try:
                await asyncio.wait({report, died}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
                died.cancel()
        if not report.done():
            # A report written just before the end may still be in the pipe.
            await asyncio.wait({report}, timeout=REPORT_GRACE)
        if not report.done():
            raise WrapperDied(f"the task wrapper (pid {wrapper_pid}) ended without reporting")
    finally:
        if fd is not None:
            os.close(fd)
