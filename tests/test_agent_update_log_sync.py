"""The status-update log's group commit: no update is sent before an fsync covered it."""

from __future__ import annotations

import asyncio
import os
import threading

from agora.v1 import common_pb2
from harness import eventually_async

from agent import status_updates
from agent.status_updates import StatusUpdateManager, UpdateLog
from common import new_uuid


def status(task_id: str) -> common_pb2.TaskStatus:
    return common_pb2.TaskStatus(task_id=task_id, state=common_pb2.TASK_RUNNING, uuid=new_uuid())


async def test_every_update_is_fsynced_before_it_is_sent(tmp_path, monkeypatch):
    path = tmp_path / "updates.jsonl"
    durable: set[bytes] = set()  # uuids in the log at some completed fsync
    lock = threading.Lock()
    real_fsync = os.fsync
    fsyncs = 0

    def recording_fsync(fd: int) -> None:
        nonlocal fsyncs
        # What the file holds now is what this fsync makes durable.
        on_disk = {s.uuid for _, s in UpdateLog(path).replay()}
        real_fsync(fd)
        with lock:
            durable.update(on_disk)
            fsyncs += 1

    monkeypatch.setattr(status_updates.os, "fsync", recording_fsync)
    sent: list[bytes] = []

    def send(framework_id: str, s: common_pb2.TaskStatus) -> bool:
        with lock:
            assert s.uuid in durable, f"{s.task_id} sent before it was fsync'd"
        sent.append(s.uuid)
        return True

    manager = StatusUpdateManager(path, send)
    manager.recover()
    manager.start()
    try:
        made = []
        for burst in range(20):
            for i in range(10):
                s = status(f"t{burst}-{i}")
                made.append(s.uuid)
                manager.update("fw", s)
            await asyncio.sleep(0)  # let the sender run between bursts, mid-fsync or not
        await eventually_async(
            lambda: set(made) <= set(sent), timeout=30, message="every update sent"
        )
        # A group commit: far fewer fsyncs than updates.
        assert fsyncs < len(made)
    finally:
        await manager.stop()
