"""Watching sandboxes: disk limits (Mesos' disk/du isolator), log rotation, garbage collection.

Every `disk_interval` seconds (1 s) the agent measures the sandbox of each running task that
asked for `disk`, off the event loop; one that uses more is killed and ends TASK_FAILED with
REASON_CONTAINER_LIMITATION_DISK ("disk limit of N MB exceeded"). Mesos checks every 15 s, and a
task wrote 512 MB into a 32 MB allocation before it was stopped (issue 35); a sandbox of a few
files is measured in tens of microseconds, so a second costs little. (A task from an image also
has its /tmp bounded by its `disk`: a tmpfs of that size.)

Every `interval` seconds the agent walks each running task's sandbox off the event loop:
- stdout and stderr past `max_log_bytes` are rotated: copied to stdout.1 (the previous one
  dropped) and truncated in place. The task writes with O_APPEND, so it goes on at the start of
  the emptied file; what it writes between the copy and the truncation is lost, as with
  logrotate's copytruncate (the price of not standing between the task and its output).
- the sandboxes of completed runs (final update acknowledged) are removed `gc_delay` seconds
  after, sooner as the disk fills: Mesos' rule, delay * max(0, 1 - headroom - disk usage), so
  at 90% full (headroom 0.1) they go at once. Within the delay a framework can still read them.
The decisions are pure functions below; the loop only reads the disk and acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import time
from pathlib import Path

import structlog

from agora.agent.usage import MB, disk_used

log = structlog.get_logger(__name__)

__all__ = [
    "DEFAULT_DISK_INTERVAL",
    "DEFAULT_GC_DELAY",
    "DEFAULT_GC_HEADROOM",
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_LOG_BYTES",
    "SandboxWatch",
    "gc_delay_now",
    "over_disk_limit",
]

DEFAULT_INTERVAL = 15.0  # log rotation and GC (Mesos' --container_disk_watch_interval)
DEFAULT_DISK_INTERVAL = 1.0  # disk limits: a task over its allocation stops within a second
DEFAULT_MAX_LOG_BYTES = 10 * MB  # Mesos' logrotate module: max_stdout_size / max_stderr_size
DEFAULT_GC_DELAY = 7 * 24 * 3600.0  # Mesos' --gc_delay: one week
DEFAULT_GC_HEADROOM = 0.1  # Mesos' --gc_disk_headroom


def gc_delay_now(delay: float, disk_used_fraction: float, headroom: float) -> float:
    """How long completed sandboxes are kept now, given how full the disk is (Mesos' rule)."""
    return delay * max(0.0, 1.0 - headroom - disk_used_fraction)


def over_disk_limit(used_bytes: int, disk_mb: float) -> str | None:
    """The message for a task over its disk allocation, or None (no allocation: no limit)."""
    if disk_mb <= 0 or used_bytes <= disk_mb * MB:
        return None
    return f"disk limit of {disk_mb:g} MB exceeded: the sandbox uses {used_bytes / MB:.1f} MB"


def rotate(path: Path, max_bytes: int) -> bool:
    """Copies `path` to `path.1` and empties it when past `max_bytes`; True if it did.

    The agent (root, usually) does this inside a sandbox that the task's user owns, so nothing
    is followed: not a symlink or a second link at `path` (the task could point it at any
    file, to have it copied out and emptied), nor anything at `path.1` (to have it written):
    `path.1` is made anew, owned as `path` is. A FIFO is left alone.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        log.warning("cannot rotate a task's log", path=str(path), error=str(e))
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            log.warning("not rotating a task's log that is not a plain file", path=str(path))
            return False
        if st.st_size <= max_bytes:
            return False
        old = path.with_name(path.name + ".1")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old)
        # O_EXCL: whatever the task put there since (a symlink included) makes this fail.
        out = os.open(old, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600)  # fmt: skip
        try:
            os.fchown(out, st.st_uid, st.st_gid)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            offset = 0
            while sent := os.sendfile(out, fd, offset, 1 << 20):
                offset += sent
        finally:
            os.close(out)
        os.ftruncate(fd, 0)
    except OSError as e:
        log.warning("cannot rotate a task's log", path=str(path), error=str(e))
        return False
    finally:
        os.close(fd)
    return True


class SandboxWatch:
    def __init__(
        self,
        tasks,
        interval: float = DEFAULT_INTERVAL,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        enforce_disk: bool = True,
        work_dir: Path | None = None,
        gc_delay: float = DEFAULT_GC_DELAY,
        gc_headroom: float = DEFAULT_GC_HEADROOM,
        disk_interval: float = DEFAULT_DISK_INTERVAL,
    ) -> None:
        self._tasks = tasks  # the TaskManager
        self.interval = interval
        self.disk_interval = min(disk_interval, interval)
        self.max_log_bytes = max_log_bytes
        self.enforce_disk = enforce_disk
        self.work_dir = work_dir  # whose filesystem's fullness shortens the GC delay
        self.gc_delay = gc_delay
        self.gc_headroom = gc_headroom
        self.removed_sandboxes = 0

    async def run(self) -> None:
        next_full = time.monotonic() + self.interval
        while True:
            await asyncio.sleep(self.disk_interval)
            if time.monotonic() >= next_full:
                next_full = time.monotonic() + self.interval
                await self.check_once()
            elif self.enforce_disk:
                await self.check_disks()

    async def check_disks(self) -> None:
        """The tasks with a disk allocation, measured in one trip off the loop."""
        limited = []
        for run in self._tasks.active_runs():
            if run.wrapper is not None and (disk_mb := run.resources.scalar("disk")) > 0:
                limited.append((run, disk_mb))
        if not limited:
            return
        used = await asyncio.to_thread(lambda: [disk_used(run.sandbox) for run, _ in limited])
        for (run, disk_mb), size in zip(limited, used, strict=True):
            message = over_disk_limit(size, disk_mb)
            if message is not None:
                self._tasks.kill_for_limit(run, "REASON_CONTAINER_LIMITATION_DISK", message)

    async def check_once(self) -> None:
        runs = [r for r in self._tasks.active_runs() if r.wrapper is not None]
        for run in runs:
            disk_mb = run.resources.scalar("disk")
            sandbox = run.sandbox
            # Off the loop: a sandbox may hold many files.
            used = await asyncio.to_thread(self._check_files, sandbox, disk_mb)
            message = over_disk_limit(used, disk_mb) if self.enforce_disk else None
            if message is not None:
                self._tasks.kill_for_limit(run, "REASON_CONTAINER_LIMITATION_DISK", message)
        await self.collect_garbage()

    async def collect_garbage(self) -> int:
        """Removes the completed sandboxes that are due; returns how many."""
        usage = 0.0
        if self.work_dir is not None:
            try:
                disk = shutil.disk_usage(self.work_dir)
                usage = disk.used / disk.total if disk.total else 0.0
            except OSError:
                pass
        delay = gc_delay_now(self.gc_delay, usage, self.gc_headroom)
        due = self._tasks.sandboxes_due(time.time(), delay)
        if due:
            await asyncio.to_thread(_remove_all, due)
            self.removed_sandboxes += len(due)
            log.info(
                "removed completed sandboxes",
                count=len(due),
                kept_seconds=round(delay, 1),
                disk_used=round(usage, 3),
            )
        return len(due)

    def _check_files(self, sandbox: Path, disk_mb: float) -> int:
        for name in ("stdout", "stderr"):
            rotate(sandbox / name, self.max_log_bytes)
        return disk_used(sandbox) if disk_mb > 0 else 0


def _remove_all(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
