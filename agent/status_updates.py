"""The status-update manager: log every update before sending, resend until acknowledged.

Updates are appended to `meta/updates.jsonl` (written to the OS, so an agent process that
crashes at any point resends every update not yet acknowledged) before they leave the agent.
The log is fsync'd in the background, once for everything appended since the last fsync (a
group commit, in a worker thread unless the log is on a filesystem in memory), and
sending does not wait for it: an fsync before sending would only delay the update. After a
crash of the machine, an update that had not reached the disk is gone whether or not it was
sent, and the agent, which lost the task with the machine, re-registers without it (or, with a
terminal update on disk, reports how it ended).
Acknowledgements are appended without an fsync: one lost in a machine crash only makes the
agent resend an update the master already has, and the master takes duplicates. The log is
compacted to the pending updates on every start.

A full disk must not lose an update: beside the log the agent keeps a reserve file, given up
the moment an append finds no space (the append then goes on into the freed room) and taken
again once there is space, so thousands of updates still fit after the disk fills.
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from agora.agent.aio_util import cancel_and_wait
from agora.agent.checkpoint import b64, unb64
from agora.agent.update_queue import UpdateQueue
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

# The log is rewritten to just the pending updates after this many appends.
COMPACT_AFTER = 10_000
# Room kept for the log on a full disk: about 3,000 updates.
RESERVE_BYTES = 1024 * 1024
# How often a given-up reserve is taken again (when there is space for it).
RESERVE_RETRY_SECONDS = 5.0
# send(framework_id, status) -> True if it went out on a registered link.
SendFn = Callable[[str, common_pb2.TaskStatus], bool]


class UpdateLog:
    """Append-only JSON lines: {"u": fw, "s": status} and {"a": fw, "t": task, "id": uuid}."""

    def __init__(self, path: Path, reserve_bytes: int = RESERVE_BYTES) -> None:
        self.path = Path(path)
        self.reserve = self.path.with_name(f".{self.path.name}.reserve")
        self.reserve_bytes = reserve_bytes
        self._file: io.FileIO | None = None
        # Updates are numbered as appended; those up to `synced` are on disk.
        self.appended = 0
        self.synced = 0
        # On a filesystem in memory an fsync does nothing: it runs in the loop (sync_soon).
        self.fsync_in_loop = in_memory(self.path)

    def replay(self) -> list[tuple[str, common_pb2.TaskStatus]]:
        """The updates not yet acknowledged, in the order they were made."""
        pending: dict[bytes, tuple[str, common_pb2.TaskStatus]] = {}
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                entry = json.loads(line)
                if "u" in entry:
                    status = common_pb2.TaskStatus.FromString(unb64(entry["s"]))
                    pending[status.uuid] = (entry["u"], status)
                elif "a" in entry:
                    pending.pop(unb64(entry["id"]), None)
            except (ValueError, KeyError, TypeError):
                # A line torn by a crash mid-append: everything before it is intact.
                log.warning("skipping torn line in update log", path=str(self.path))
        return list(pending.values())

    def open(self, pending: list[tuple[str, common_pb2.TaskStatus]]) -> None:
        """Rewrites the log to hold only `pending`, then appends from there."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with open(tmp, "w") as f:
                for framework_id, status in pending:
                    f.write(self._update_line(framework_id, status))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if not self.path.exists():
                raise
            # A full disk: the old log holds the same pending updates (and more history).
            log.error("cannot compact the status-update log; appending to it", error=str(e))
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open
        self.synced = self.appended
        self.keep_reserve()

    def keep_reserve(self) -> bool:
        """Takes the reserve if it is not held; False if there is no space for it yet."""
        if self.reserve.exists():
            return True
        try:
            with open(self.reserve, "wb") as f:
                f.write(bytes(self.reserve_bytes))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            self.reserve.unlink(missing_ok=True)
            return False
        return True

    @property
    def unsynced(self) -> bool:
        return self.appended > self.synced

    def append_update(self, framework_id: str, status: common_pb2.TaskStatus) -> int:
        """Appends (to the OS, not yet to the disk: see sync); returns the update's number."""
        self._append(self._update_line(framework_id, status))
        self.appended += 1
        return self.appended

    def append_ack(self, framework_id: str, task_id: str, uuid: bytes) -> None:
        self._append(json.dumps({"a": framework_id, "t": task_id, "id": b64(uuid)}) + "\n")

    def sync(self) -> None:
        """Makes every appended line durable."""
        assert self._file is not None, "UpdateLog.open() first"
        os.fsync(self._file.fileno())
        self.synced = self.appended

    async def sync_soon(self) -> None:
        """sync() without holding up the event loop; appends meanwhile are not covered.

        The fsync runs in a worker thread, except on a filesystem in memory (tmpfs, ramfs),
        where it returns at once and the hand-off would cost far more (the submit, the wake-up,
        the GIL back and forth: a tenth of an agent's CPU in a launch run on tmpfs). Not by
        timing fsyncs: a disk that is usually quick can still stall, and the loop must not."""
        if self.fsync_in_loop:
            self.sync()
            return
        assert self._file is not None, "UpdateLog.open() first"
        target = self.appended
        # A duplicate fd: compaction may close and reopen the log while the fsync runs.
        fd = os.dup(self._file.fileno())
        await asyncio.get_running_loop().run_in_executor(None, _fsync_and_close, fd)
        self.synced = max(self.synced, target)

    def close(self) -> None:
        if self._file is not None:
            if self.unsynced:
                self.sync()
            self._file.close()
            self._file = None

    def _append(self, line: str) -> None:
        """Writes the whole line to the OS (surviving a crash of the agent; a later sync()
        covers the machine), giving up the reserve if the disk is full."""
        assert self._file is not None, "UpdateLog.open() first"
        data, done = line.encode(), 0
        while done < len(data):
            try:
                done += self._file.write(data[done:]) or 0
            except OSError as e:
                if e.errno != errno.ENOSPC or not self.reserve.exists():
                    raise
                self.reserve.unlink()
                log.error(
                    "the agent's disk is full: using the room reserved for status updates",
                    path=str(self.path),
                )

    @staticmethod
    def _update_line(framework_id: str, status: common_pb2.TaskStatus) -> str:
        return json.dumps({"u": framework_id, "s": b64(status.SerializeToString())}) + "\n"


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def in_memory(path: Path, mounts: str | None = None) -> bool:
    """Whether `path` is on a filesystem kept in memory, by the longest mount point above it
    in `mounts` (/proc/self/mounts). False when that cannot be told."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return False
    target = os.path.realpath(path)
    best, fstype = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, fstype = point, fields[2]
    return fstype in MEMORY_FILESYSTEMS


class StatusUpdateManager:
    """Owns the update queue and its log; a background task (re)sends due updates."""

    def __init__(
        self,
        log_path: Path,
        send: SendFn,
        initial_backoff: float = 0.5,
        max_backoff: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = UpdateLog(log_path)
        self._queue = UpdateQueue(initial_backoff, max_backoff)
        self._send = send
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._appended = 0  # lines appended since the log was last rewritten
        self._sync_wanted = asyncio.Event()
        # When the sender loop's timer fires (None: it waits for a wake-up only).
        self._sleeping_until: float | None = None
        self._syncer: asyncio.Task | None = None
        self._reserve_retry_at = 0.0

    def recover(self) -> list[tuple[str, common_pb2.TaskStatus]]:
        """Loads the unacknowledged updates of a previous run; call once, before `start`."""
        pending = self._log.replay()
        for framework_id, status in pending:
            self._queue.add(framework_id, status)
        self._log.open(pending)
        if pending:
            log.info("recovered unacknowledged status updates", count=len(pending))
        return pending

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="status-update-resender")
        self._syncer = asyncio.create_task(self._sync_loop(), name="status-update-log-fsync")

    async def stop(self) -> None:
        await cancel_and_wait(self._task, self._syncer)
        self._task = self._syncer = None
        self._log.close()  # fsyncs whatever the background fsync had not covered yet

    def _retake_reserve(self) -> None:
        now = self._clock()
        if now >= self._reserve_retry_at and not self._log.keep_reserve():
            self._reserve_retry_at = now + RESERVE_RETRY_SECONDS

    def update(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        """Logs the update (to the OS at once, to the disk soon after), then queues it for
        (reliable) delivery."""
        self._log.append_update(framework_id, status)
        self._queue.add(framework_id, status)
        self._appended += 1
        self._sync_wanted.set()
        self._send_head_now(framework_id, status.task_id)

    def _maybe_compact(self) -> None:
        """Rewrites the log to the pending updates once it is mostly acknowledged history."""
        if self._appended < COMPACT_AFTER or self._appended < 4 * len(self._queue):
            return
        self._log.close()
        self._log.open(self._queue.all_pending())
        self._appended = 0

    def ack(self, framework_id: str, task_id: str, uuid: bytes) -> common_pb2.TaskStatus | None:
        """Returns the acknowledged update, or None for an unknown or duplicate ack."""
        status = self._queue.ack(framework_id, task_id, uuid)
        if status is None:
            log.debug(
                "ignoring ack of no pending update",
                framework_id=framework_id,
                task_id=task_id,
                uuid=uuid.hex(),
            )
            return None
        self._log.append_ack(framework_id, task_id, uuid)
        self._appended += 1
        self._maybe_compact()
        self._send_head_now(framework_id, task_id)
        return status

    def _send_head_now(self, framework_id: str, task_id: str) -> None:
        """Sends the task's oldest pending update if it is due, without waiting for the sender
        loop (a wake-up and a scan of every stream per update); the loop does the resends."""
        now = self._clock()
        status = self._queue.due_head(framework_id, task_id, now)
        if status is None or not self._send(framework_id, status):
            # Not due (the loop's timer covers it) or not registered (re-registering resends).
            return
        self._queue.mark_sent(framework_id, task_id, now)
        resend_at = self._queue.next_attempt(framework_id, task_id)
        if self._sleeping_until is None or resend_at < self._sleeping_until:
            self._wake.set()  # the loop's timer must cover this resend too

    def resend_all_now(self) -> None:
        """After (re-)registering: every task's oldest pending update goes out at once."""
        self._queue.reset()
        self._wake.set()

    def drop_all(self) -> None:
        """Forgets every pending update (the agent was removed: its tasks are already LOST)."""
        for framework_id, status in self._queue.all_pending():
            self._log.append_ack(framework_id, status.task_id, status.uuid)
        self._queue.drop_all()

    async def wait_acknowledged(self, timeout: float) -> bool:
        """Waits up to `timeout` for every pending update to be acknowledged."""
        deadline = self._clock() + timeout
        while len(self._queue) and self._clock() < deadline:
            await asyncio.sleep(0.05)
        return not len(self._queue)

    def pending(self, framework_id: str, task_id: str) -> list[common_pb2.TaskStatus]:
        return self._queue.pending(framework_id, task_id)

    def pending_count(self) -> int:
        return self._queue.pending_count()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = self._clock()
            for framework_id, status in self._queue.due(now):
                if not self._send(framework_id, status):
                    # Not registered: wait for the link to come back (it calls resend_all_now).
                    break
                log.debug(
                    "sent status update",
                    framework_id=framework_id,
                    task_id=status.task_id,
                    state=common_pb2.TaskState.Name(status.state),
                    uuid=status.uuid.hex(),
                )
                self._queue.mark_sent(framework_id, status.task_id, now)
            else:
                next_due = self._sleeping_until = self._queue.next_due()
                timeout = None if next_due is None else max(next_due - self._clock(), 0.0)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass
                continue
            self._sleeping_until = None
            await self._wake.wait()

    async def _sync_loop(self) -> None:
        """Group commit: one fsync for every update appended while the previous one ran."""
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted.clear()
            if not self._log.unsynced:
                continue
            try:
                await self._log.sync_soon()
                self._retake_reserve()
            except OSError as e:
                # A full or failing disk: keep trying (the updates still go out meanwhile).
                log.error("cannot fsync the status-update log", error=str(e))
                self._sync_wanted.set()
                await asyncio.sleep(1.0)
