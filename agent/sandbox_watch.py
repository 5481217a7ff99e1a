"""Watching running tasks' sandboxes: disk limits (Mesos' disk/du isolator) and log rotation.

Every `interval` seconds the agent walks each running task's sandbox off the event loop:
- a task that asked for `disk` and uses more is killed and ends TASK_FAILED with
  REASON_CONTAINER_LIMITATION_DISK ("disk limit of N MB exceeded");
- stdout and stderr past `max_log_bytes` are rotated: copied to stdout.1 (the previous one
  dropped) and truncated in place. The task writes with O_APPEND, so it goes on at the start of
  the emptied file; what it writes between the copy and the truncation is lost, as with
  logrotate's copytruncate (the price of not standing between the task and its output).
The decisions are pure functions below; the loop only reads the disk and acts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import structlog

from agora.agent.usage import MB, disk_used
from agora.common import ResourceError, Resources

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_MAX_LOG_BYTES", "SandboxWatch", "over_disk_limit"]

DEFAULT_INTERVAL = 15.0  # Mesos' --container_disk_watch_interval
DEFAULT_MAX_LOG_BYTES = 10 * MB  # Mesos' logrotate module: max_stdout_size / max_stderr_size


def over_disk_limit(used_bytes: int, disk_mb: float) -> str | None:
    """The message for a task over its disk allocation, or None (no allocation: no limit)."""
    if disk_mb <= 0 or used_bytes <= disk_mb * MB:
        return None
    return f"disk limit of {disk_mb:g} MB exceeded: the sandbox uses {used_bytes / MB:.1f} MB"


def rotate(path: Path, max_bytes: int) -> bool:
    """Copies `path` to `path.1` and empties it when past `max_bytes`; True if it did."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
        shutil.copyfile(path, path.with_name(path.name + ".1"))
        os.truncate(path, 0)
    except OSError as e:
        log.warning("cannot rotate a task's log", path=str(path), error=str(e))
        return False
    return True


class SandboxWatch:
    def __init__(
        self,
        tasks,
        interval: float = DEFAULT_INTERVAL,
        max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
        enforce_disk: bool = True,
    ) -> None:
        self._tasks = tasks  # the TaskManager
        self.interval = interval
        self.max_log_bytes = max_log_bytes
        self.enforce_disk = enforce_disk

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check_once()

    async def check_once(self) -> None:
        runs = [r for r in self._tasks.active_runs() if r.wrapper is not None]
        for run in runs:
            try:
                disk_mb = Resources.from_proto(run.task.resources).scalar("disk")
            except ResourceError:
                disk_mb = 0.0
            sandbox = run.sandbox
            # Off the loop: a sandbox may hold many files.
            used = await asyncio.to_thread(self._check_files, sandbox, disk_mb)
            message = over_disk_limit(used, disk_mb) if self.enforce_disk else None
            if message is not None:
                self._tasks.kill_for_limit(run, "REASON_CONTAINER_LIMITATION_DISK", message)

    def _check_files(self, sandbox: Path, disk_mb: float) -> int:
        for name in ("stdout", "stderr"):
            rotate(sandbox / name, self.max_log_bytes)
        return disk_used(sandbox) if disk_mb > 0 else 0
