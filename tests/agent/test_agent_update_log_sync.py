"""The status-update log: every update is in the log before it is sent, and fsync'd soon after
in group commits that sending never waits for."""

from __future__ import annotations

import asyncio
import os
import threading

from harness import eventually_async

from agora.agent import status_updates
from agora.agent.status_updates import StatusUpdateManager, UpdateLog
from agora.common import new_uuid
from agora.v1 import common_pb2


def status(task_id: str) -> common_pb2.TaskStatus:
    return common_pb2.TaskStatus(task_id=task_id, state=common_pb2.TASK_RUNNING, uuid=new_uuid())


async def test_updates_are_logged_before_sent_and_fsynced_in_group_commits(tmp_path, monkeypatch):
    path = tmp_path / "updates.jsonl"
    lock = threading.Lock()
    real_fsync = os.fsync
    durable: set[bytes] = set()  # uuids in the log at some completed fsync
    fsyncs = 0
    # The first fsync hangs until released: updates must keep leaving meanwhile.
    release = threading.Event()

    def slow_fsync(fd: int) -> None:
        nonlocal fsyncs
        on_disk = {s.uuid for _, s in UpdateLog(path).replay()}
        release.wait(timeout=60)
        real_fsync(fd)
        with lock:
            durable.update(on_disk)
            fsyncs += 1

    monkeypatch.setattr(status_updates.os, "fsync", slow_fsync)
    sent: list[bytes] = []

    def send(framework_id: str, s: common_pb2.TaskStatus) -> bool:
        # What a restarted agent would replay: the update must be there already.
        assert s.uuid in {u.uuid for _, u in UpdateLog(path).replay()}, f"{s.task_id} not logged"
        sent.append(s.uuid)
        return True

    manager = StatusUpdateManager(path, send)
    release.set()  # recover() rewrites the log with an fsync of its own
    manager.recover()
    release.clear()
    fsyncs = 0
    manager.start()
    try:
        made = []
        for burst in range(20):
            for i in range(10):
                s = status(f"t{burst}-{i}")
                made.append(s.uuid)
                manager.update("fw", s)
            await asyncio.sleep(0)  # let the background fsync start between bursts
        await eventually_async(
            lambda: set(made) <= set(sent), timeout=30, message="every update sent"
        )
        assert fsyncs == 0, "sent while the first fsync still hung"
        release.set()
        await eventually_async(
            lambda: set(made) <= durable, timeout=30, message="every update fsync'd"
        )
        # A group commit: far fewer fsyncs than updates.
        assert fsyncs < len(made)
    finally:
        release.set()
        await manager.stop()


async def test_unacknowledged_update_is_resent_after_a_direct_send(tmp_path):
    """An update sent at once (not by the sender loop) still gets its timed resend."""
    sent: list[str] = []
    manager = StatusUpdateManager(
        tmp_path / "updates.jsonl",
        lambda fw, s: sent.append(s.task_id) or True,
        initial_backoff=0.05,
        max_backoff=0.1,
    )
    manager.recover()
    manager.start()
    try:
        manager.update("fw", status("t"))
        assert sent == ["t"]  # at once, from update()
        await eventually_async(lambda: sent.count("t") >= 3, timeout=30, message="resent")
    finally:
        await manager.stop()
