"""The first route to a task wrapper: C wrappers spawned by the agent itself (agent/spawners.py).

The fork server (agent/fork_server.py) exists to fork Python wrappers from a small process
rather than from the agent. The C wrapper needs no fork: posix_spawn starts it without copying
the agent (the parent waits, sharing its memory, until the exec). Going through the server
then only adds a hop per task: a line down its pipe, a "handed" line back, and the server's
own Python (together about 0.3 ms of CPU a task). Here the agent spawns the wrapper, which
reports on a pipe the agent keeps (one for all runs: each report is one write shorter than
PIPE_BUF, prefixed with the run id, as on the launcher's pipe).

The wrapper is then the agent's child: it still has its own session and outlives the agent
(re-parented when the agent exits). Until it reports, a pidfd watches it: a wrapper that ends
without reporting fails its launch instead of leaving it waiting, and is reaped. Once it has
reported "started", the task manager watches it (Wrapper.wait, which reaps it as it ends), so
a running task holds one pidfd, not two; one that reported an error is reaped here. A wrapper
still running when the agent stops stays its child, a zombie once it ends, until the agent's
process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from pathlib import Path

import structlog

from agora.agent import c_wrapper_spawn
from agora.agent.launch_spec import LaunchSpec
from agora.agent.spawners import REPORT_GRACE, WrapperDied
from agora.agent.wrapper_reports import Refused, Report, Started, parse_line

__all__ = ["CWrapperSpawner", "reap", "usable"]

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.25
# The report pipe's and the log's fds are kept above the ones a wrapper's are dup'd onto (0-3).
HIGH_FD = 10


def usable() -> bool:
    """Whether this kernel has pidfds (Linux >= 5.3), which watch each spawned wrapper."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (OSError, AttributeError):
        return False
    return True


def reap(pid: int) -> None:
    """Reaps `pid` if it is an ended child of this process (a wrapper it spawned)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _high(fd: int) -> int:
    """`fd` moved to HIGH_FD or above (close-on-exec), so no file action of a spawn overwrites
    it before it is dup'd."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    finally:
        os.close(fd)


class CWrapperSpawner:
    """Spawns C wrappers from this process and reads their reports."""

    name = "c-wrapper"
    tries = 1

    def __init__(self, wrapper: str, log_path: Path | None = None) -> None:
        self.wrapper = wrapper
        self._log_path = log_path
        self._log_fd: int | None = None  # the wrappers' stderr (None: the agent's own)
        self._reports_r: int | None = None
        self._reports_w: int | None = None
        self._pending: dict[str, asyncio.Future[Report]] = {}
        self._children: dict[int, int] = {}  # pid -> pidfd, until it reports or ends
        self._polled: set[int] = set()  # the same, where no pidfd could be opened
        self._reader: asyncio.Task | None = None
        self._transport: asyncio.ReadTransport | None = None
        self.broken: str | None = None  # why the C wrapper cannot be spawned, once it cannot

    async def start(self) -> None:
        """Opens the report pipe (and the log) unless open; OSError if it cannot, with nothing
        left open."""
        if self._reader is not None:
            return
        loop = asyncio.get_running_loop()
        try:
            if self._log_path is not None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                self._log_fd = _high(os.open(self._log_path, flags, 0o644))
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
            self._reports_w = _high(write_fd)
            self._reports_r = read_fd
            stream = asyncio.StreamReader()
            pipe = os.fdopen(read_fd, "rb", buffering=0)
            self._reports_r = None  # the file object owns it now
            try:
                self._transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(stream), pipe
                )
            except BaseException:
                pipe.close()
                raise
        except BaseException:
            self._close_fds()
            raise
        self._reader = asyncio.create_task(self._read(stream), name="wrapper-reports-reader")

    async def _read(self, stream: asyncio.StreamReader) -> None:
        # The agent holds the write end for spawning: EOF comes only from close().
        try:
            while line := await stream.readline():
                run_id, report = parse_line(line)
                future = self._pending.pop(run_id, None)
                if future is not None and not future.done():
                    future.set_result(report or Refused("the task wrapper failed to start"))
        except (OSError, ValueError) as e:  # ValueError: a line over the reader's limit
            log.warning("cannot read the task wrappers' reports", error=str(e))
            self.broken = f"cannot read the task wrappers' reports: {e}"
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(WrapperDied(self.broken))
            self._pending.clear()

    async def spawn(self, run_dir: Path, spec: LaunchSpec) -> Started | Refused | None:
        """The wrapper's report on run_dir; None when the C wrapper cannot take this spec (or
        cannot be spawned any more): the next route takes it. Raises WrapperDied if the
        wrapper ends without reporting."""
        if self.broken is not None or self._reports_w is None:
            return None
        loop = asyncio.get_running_loop()
        run_id = run_dir.name
        report: asyncio.Future[Report] = loop.create_future()
        self._pending[run_id] = report
        pid = None
        try:
            try:
                pid = c_wrapper_spawn.spawn_native(
                    self.wrapper,
                    str(run_dir),
                    spec,
                    self._reports_w,
                    self._log_fd if self._log_fd is not None else 2,
                    # The loop must not block on the environment pipe: one too big for it goes
                    # to the launcher.
                    pipe_only=True,
                )
            except OSError as e:
                if e.errno in c_wrapper_spawn.WRAPPER_BROKEN:
                    # Gone or broken (a cleaned cache?): the launcher's wrappers from now on.
                    self.broken = str(e)
                    log.warning(
                        "the C task wrapper cannot be spawned; using the launcher's wrappers",
                        error=str(e),
                    )
                    return None
                return Refused(f"cannot spawn the task wrapper: {e}")
            if pid is None:
                return None
            self._watch(pid, report)
            result = await report
            if isinstance(result, Started):
                self._unwatch(pid)  # the task manager's Wrapper.wait takes over (and reaps)
            if isinstance(result, Started | Refused):
                return result
            return Refused("the task wrapper failed to start")
        finally:
            if self._pending.get(run_id) is report:
                del self._pending[run_id]

    def _watch(self, pid: int, report: asyncio.Future[Report]) -> None:
        """Reaps `pid` when it ends before reporting "started"; fails `report` if it ended
        without one."""
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            self._polled.add(pid)  # no fd to spare now: polled instead
            self._poll(pid, report)
            return
        self._children[pid] = fd

        def on_exit() -> None:
            self._unwatch(pid)
            reap(pid)
            self._ended(report, pid)

        loop.add_reader(fd, on_exit)

    def _unwatch(self, pid: int) -> None:
        self._polled.discard(pid)
        fd = self._children.pop(pid, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def _poll(self, pid: int, report: asyncio.Future[Report]) -> None:
        if pid not in self._polled:
            return  # it reported (Wrapper.wait watches it now), or this was closed
        try:
            ended = os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            ended = True
        if ended:
            self._polled.discard(pid)
            self._ended(report, pid)
        else:
            asyncio.get_running_loop().call_later(POLL_SECONDS, self._poll, pid, report)

    @staticmethod
    def _ended(report: asyncio.Future[Report], pid: int) -> None:
        if report.done():
            return

        def give_up() -> None:
            # A report written just before the end may still have been in the pipe.
            if not report.done():
                report.set_exception(
                    WrapperDied(f"the task wrapper (pid {pid}) ended without reporting")
                )

        asyncio.get_running_loop().call_later(REPORT_GRACE, give_up)

    async def stop(self) -> None:
        """Stops reading reports and watching; running wrappers carry on (and are re-parented
        when this process exits)."""
        for pid in [*self._children, *self._polled]:
            self._unwatch(pid)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        self._close_fds()
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()

    def _close_fds(self) -> None:
        for name in ("_reports_r", "_reports_w", "_log_fd"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)
