"""The fork server's process (`python -m agora.agent.executor --serve`): started once by the
agent, it reads one launch per line on stdin ("RUN_DIR<TAB>SPEC_JSON", the LaunchSpec's wire
form) and hands it to a Python wrapper it forked ahead of time (a spare), so a launch costs
neither a Python start-up nor a fork on its way; given the C wrapper (`--native WRAPPER`, where
the agent has no pidfds to watch the ones it would spawn), it spawns that instead. The agent's
side of the pipe is agent/fork_server.py.

A spare (forked before its launch arrives and replaced as soon as it gets one) has a session
of its own; it is the server's child (not the agent's), reaped by the kernel since the server
ignores SIGCHLD, and adopted by init when the server exits, so it outlives both. The server's
stdout is shared by every wrapper it starts; each reports with ONE write shorter than PIPE_BUF
(agora.agent.wrapper_reports), which the kernel never interleaves with another; the server's
own line after a hand-off, "RUN_ID handed PID START_TICKS", names the wrapper that took the
run. Nothing here uses threads, so forking is safe.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from agora.agent.c_wrapper_spawn import WRAPPER_BROKEN, spawn_native, write_all
from agora.agent.launch_spec import LaunchSpec
from agora.agent.proc_stat import start_ticks
from agora.agent.python_wrapper import become_wrapper, report, take_launch_line
from agora.agent.wrapper_reports import Handed, Refused, format_report

__all__ = ["serve"]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _fork_spare() -> tuple[int, int]:
    """In the launcher: forks the next run's wrapper ahead of time; returns (pid, fd).

    The spare has its session set up and waits for one launch line on the pipe behind `fd`,
    so a launch costs a pipe write instead of a fork. Unlike the one-shot wrapper it needs no
    second fork: it is the launcher's child, not the agent's, and the launcher ignores SIGCHLD
    so the kernel reaps it when it ends (no zombie for a pidfd or a /proc check to mistake).
    When the launcher exits, init adopts it; a spare still waiting reads EOF and exits.
    """
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid > 0:
        os.close(read_fd)
        return pid, write_fd
    code = 1
    try:
        os.close(write_fd)
        become_wrapper()
        line = _read_all(read_fd)
        os.close(read_fd)
        if line:
            code = take_launch_line(line)
        else:
            code = 0  # the launcher ended: nothing to run
    except BaseException as e:  # noqa: BLE001 - never return into the launcher's loop
        try:
            report(Refused(f"executor failed: {e!r}"))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


class _Spares:
    """The launcher's one spare wrapper, replaced as soon as it is handed a launch."""

    def __init__(self) -> None:
        self._spare: tuple[int, int] | None = None

    def refill(self) -> None:
        if self._spare is None:
            try:
                self._spare = _fork_spare()
            except OSError:
                pass  # no process to spare now (EAGAIN, ENOMEM): the next launch forks

    def launch(self, line: bytes) -> int:
        """Hands the line to the spare (forking one if none is ready) and returns its pid;
        OSError if impossible."""
        for _ in range(2):
            if self._spare is None:
                self._spare = _fork_spare()
            pid, fd = self._spare
            self._spare = None
            try:
                write_all(fd, line)
                return pid
            except BrokenPipeError:
                continue  # the spare died before its launch (killed?): fork another
            finally:
                os.close(fd)
        raise OSError("the task wrapper died before it could start the command")

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare[1])  # the spare reads EOF and exits
            self._spare = None


def _spawn_native(wrapper: str, line: bytes) -> int | None:
    """Spawns the C wrapper for a launch line that carries its spec; returns its pid, or None
    for a line the Python wrapper must take (no spec, or one the C one cannot be given)."""
    raw_dir, _, raw_spec = line.partition(b"\t")
    if not raw_spec:
        return None
    try:
        spec = LaunchSpec.from_wire(json.loads(raw_spec))
    except ValueError:
        return None  # the Python wrapper reports what is wrong with it
    return spawn_native(wrapper, os.fsdecode(raw_dir), spec)


def serve(native: str | None = None) -> int:
    """The launcher: one launch line per line on stdin; exits at EOF (the agent is gone).
    `native`: the C wrapper (agent/native_wrapper.py) to spawn for each launch, instead of
    handing it to a forked Python wrapper."""
    # Ctrl-C in the agent's terminal is the agent's business; it closes our stdin when done.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Wrappers are reaped by the kernel as they end: the launcher never waits for them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    spares = _Spares()
    if native is None:
        spares.refill()
    pending = b""
    try:
        while True:
            try:
                chunk = os.read(0, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return 0
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                run_id = Path(os.fsdecode(line.partition(b"\t")[0].strip())).name
                try:
                    pid = None
                    if native is not None:
                        try:
                            pid = _spawn_native(native, line.strip())
                        except OSError as e:
                            if e.errno not in WRAPPER_BROKEN:
                                raise
                            # Gone or broken (a cleaned cache?): Python wrappers from now on.
                            message = f"the C task wrapper cannot be spawned ({e}); forking "
                            print(message + "Python wrappers from now on", file=sys.stderr)
                            native = None
                    if pid is None:
                        pid = spares.launch(line.strip())
                except OSError as e:
                    # No process to spare (EAGAIN, ENOMEM): this launch fails, the launcher
                    # lives.
                    refused = Refused(f"cannot fork the task wrapper: {e}")
                    os.write(1, format_report(refused, run_id))
                    continue
                # Lets the agent watch the wrapper until it reports: one that dies before
                # that (killed) would otherwise leave the launch waiting for ever. The start
                # ticks let it tell that process from a later one with the same pid.
                os.write(1, format_report(Handed(pid, start_ticks(pid)), run_id))
            # Off the launch's path: the next spare is forked while this one starts its command.
            if native is None:
                spares.refill()
    finally:
        spares.close()
