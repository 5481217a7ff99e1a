"""C wrappers spawned by the agent itself, without the launcher process in between.

The launcher (agent/executor.py --serve) exists to fork Python wrappers from a small process
rather than from the agent. The C wrapper needs no fork: posix_spawn starts it without copying
the agent (the parent waits, sharing its memory, until the exec). Going through the launcher
then only adds a hop per task: a line down its pipe, a "handed" line back, and the launcher's
own Python (together about 0.3 ms of CPU a task). Here the agent spawns the wrapper, which
reports on a pipe the agent keeps (one for all runs: each report is one write shorter than
PIPE_BUF, prefixed with the run id, as on the launcher's pipe).

The wrapper is then the agent's child: it still has its own session and outlives the agent
(re-parented when the agent exits), and each one is watched through a pidfd from its spawn,
reaped as it ends (a child nobody waits for stays a zombie), and a launch whose wrapper ends
without reporting fails instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import structlog

from agora.agent import executor

log = structlog.get_logger(__name__)

# After a wrapper dies, how long its report (written before it died, if at all) may take to
# come through the report pipe.
REPORT_GRACE = 1.0
POLL_SECONDS = 0.25


def usable() -> bool:
    """Whether this kernel has pidfds (Linux >= 5.3), which watch each spawned wrapper."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (OSError, AttributeError):
        return False
    return True


class WrapperDied(Exception):
    """The wrapper handed this run ended without reporting on it."""


class DirectSpawns:
    """Spawns C wrappers from this process and reads their reports."""

    def __init__(self, wrapper: str, log_path: Path | None = None) -> None:
        self.wrapper = wrapper
        # The wrappers' stderr, as for the launcher's (else the agent's own).
        self._log_fd = (
            os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if log_path is not None
            else 2
        )
        self._reports_r, self._reports_w = os.pipe2(os.O_CLOEXEC)
        self._pending: dict[str, asyncio.Future[str]] = {}
        self._children: dict[int, int] = {}  # pid -> pidfd, until reaped
        self._reader: asyncio.Task | None = None
        self._transport: asyncio.ReadTransport | None = None
        self.broken: str | None = None  # why the C wrapper cannot be spawned, once it cannot

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        pipe = os.fdopen(self._reports_r, "rb", buffering=0)
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), pipe
        )
        self._reader = asyncio.create_task(self._read(stream), name="wrapper-reports-reader")

    async def _read(self, stream: asyncio.StreamReader) -> None:
        # The agent holds the write end for spawning: EOF comes only from close().
        while line := await stream.readline():
            run_id, _, report = line.decode(errors="replace").rstrip("\n").partition(" ")
            future = self._pending.pop(run_id, None)
            if future is not None and not future.done():
                future.set_result(report)

    async def launch(self, run_dir: Path, spec: dict) -> str | None:
        """The wrapper's report on run_dir ("started ..." or "error ..."); None when the C
        wrapper cannot take this spec (or cannot be spawned any more): the caller hands it to
        the launcher. Raises WrapperDied if the wrapper ends without reporting."""
        if self.broken is not None:
            return None
        loop = asyncio.get_running_loop()
        run_id = run_dir.name
        report: asyncio.Future[str] = loop.create_future()
        self._pending[run_id] = report
        try:
            try:
                pid = executor.spawn_native(
                    self.wrapper, str(run_dir), spec, self._reports_w, self._log_fd
                )
            except OSError as e:
                if e.errno in executor.WRAPPER_BROKEN:
                    # Gone or broken (a cleaned cache?): the launcher's wrappers from now on.
                    self.broken = str(e)
                    log.warning(
                        "the C task wrapper cannot be spawned; using the launcher's wrappers",
                        error=str(e),
                    )
                    return None
                return f"error cannot spawn the task wrapper: {e}"
            if pid is None:
                return None
            self._watch(pid, report)
            return await report
        finally:
            if self._pending.get(run_id) is report:
                del self._pending[run_id]

    def _watch(self, pid: int, report: asyncio.Future[str]) -> None:
        """Reaps `pid` when it ends; fails `report` if it ended without one."""
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            self._poll(pid, report)  # no fd to spare now: polled instead
            return
        self._children[pid] = fd

        def on_exit() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            del self._children[pid]
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            self._ended(report, pid)

        loop.add_reader(fd, on_exit)

    def _poll(self, pid: int, report: asyncio.Future[str]) -> None:
        try:
            ended = os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            ended = True
        if ended:
            self._ended(report, pid)
        else:
            asyncio.get_running_loop().call_later(POLL_SECONDS, self._poll, pid, report)

    @staticmethod
    def _ended(report: asyncio.Future[str], pid: int) -> None:
        if report.done():
            return

        def give_up() -> None:
            # A report written just before the end may still have been in the pipe.
            if not report.done():
                report.set_exception(
                    WrapperDied(f"the task wrapper (pid {pid}) ended without reporting")
                )

        asyncio.get_running_loop().call_later(REPORT_GRACE, give_up)

    async def close(self) -> None:
        """Stops reading reports and watching; running wrappers carry on (and are re-parented
        when this process exits)."""
        loop = asyncio.get_running_loop()
        for fd in self._children.values():
            loop.remove_reader(fd)
            os.close(fd)
        self._children.clear()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._transport is not None:
            self._transport.close()
        else:
            os.close(self._reports_r)
        os.close(self._reports_w)
        if self._log_fd != 2:
            os.close(self._log_fd)
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
