"""The `Agent` gRPC service: read, follow and list files in a task's sandbox; list tasks.

Every path is relative to the task's sandbox and must stay inside it: '..' components, absolute
paths and symlinks that lead out are refused with INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc

from agora.agent.task_manager import TaskManager, TaskRun, is_terminal
from agora.v1 import agent_pb2, agent_pb2_grpc

MAX_READ = 1024 * 1024
FOLLOW_POLL_SECONDS = 0.2


def resolve_in_sandbox(sandbox: Path, relative: str) -> Path:
    """The real path of `relative` inside `sandbox`; ValueError if it would leave it."""
    if "\0" in relative:
        raise ValueError("the path contains a NUL byte")
    if relative.startswith("/"):
        raise ValueError(f"path {relative!r} must be relative to the task's sandbox")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {relative!r} leaves the task's sandbox: '..' is not allowed")
    root = sandbox.resolve()
    target = root.joinpath(*parts).resolve()
    if target != root and root not in target.parents:
        raise ValueError(f"path {relative!r} leads outside the task's sandbox")
    return target


class AgentFilesService(agent_pb2_grpc.AgentServicer):
    def __init__(self, tasks: TaskManager, pending=None) -> None:
        self._tasks = tasks
        # (framework_id, task_id) -> unacknowledged updates, from the status-update manager.
        self._pending = pending or (lambda framework_id, task_id: [])

    async def _run(self, request, context) -> TaskRun:
        if not request.task_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "task_id is required")
        run = self._tasks.find(request.framework_id, request.task_id)
        if run is None:
            where = f" of framework {request.framework_id!r}" if request.framework_id else ""
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no task {request.task_id!r}{where} on this agent"
            )
        return run

    async def _path(self, run: TaskRun, relative: str, context) -> Path:
        try:
            return resolve_in_sandbox(run.sandbox, relative)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    async def _file(self, request, context) -> tuple[TaskRun, Path]:
        run = await self._run(request, context)
        if not request.path:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "path is required, e.g. 'stdout' or 'stderr'"
            )
        path = await self._path(run, request.path, context)
        if not path.is_file():
            await context.abort(
                grpc.StatusCode.NOT_FOUND
                if not path.exists()
                else grpc.StatusCode.INVALID_ARGUMENT,
                f"{request.path!r} is not a file in the sandbox of task {run.task.task_id!r}",
            )
        return run, path

    async def ReadFile(self, request, context):
        _, path = await self._file(request, context)
        length = request.length if request.length > 0 else MAX_READ
        length = min(length, MAX_READ)
        data, offset, size = await self._read(path, request.offset, length, context)
        return agent_pb2.ReadFileResponse(data=data, offset=offset, size=size)

    async def FollowFile(self, request, context):
        run, path = await self._file(request, context)
        offset = request.offset
        if offset < 0:
            offset = max(path.stat().st_size + offset, 0)
        while True:
            # Check before reading, so that everything written before the end is sent.
            ended = is_terminal(run.state)
            data, start, _ = await self._read(path, offset, MAX_READ, context)
            if data:
                yield agent_pb2.FileChunk(data=data, offset=start)
                offset = start + len(data)
                continue
            if ended:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)

    async def ListFiles(self, request, context):
        run = await self._run(request, context)
        directory = await self._path(run, request.path, context)
        if not directory.is_dir():
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"{request.path!r} is not a directory in the sandbox"
            )
        try:
            # In a thread: a task may leave thousands of files, and the loop serves every task.
            entries = await asyncio.to_thread(_list, directory, run.sandbox.resolve())
        except OSError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"cannot list {request.path!r}: {e}"
            )
        return agent_pb2.ListFilesResponse(files=entries)

    async def _read(self, path: Path, offset: int, length: int, context):
        """_read in a thread; the task owns its sandbox, so its files may vanish at any time."""
        try:
            return await asyncio.to_thread(_read, path, offset, length)
        except FileNotFoundError:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{path.name!r} is gone")
        except OSError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot read it: {e}")

    async def ListTasks(self, request, context):
        # Every run the agent remembers: running, ended (with updates still to acknowledge),
        # and the recent completed ones whose sandboxes can still be read.
        out = []
        for run in self._tasks.runs():
            out.append(
                agent_pb2.AgentTask(
                    framework_id=run.record.framework_id,
                    task=run.task,
                    state=run.state,
                    sandbox=str(run.sandbox),
                    pid=run.wrapper.task_pid if run.wrapper is not None else 0,
                    unacknowledged_updates=len(
                        self._pending(run.record.framework_id, run.task.task_id)
                    ),
                )
            )
        return agent_pb2.ListAgentTasksResponse(tasks=out)


def _list(directory: Path, root: Path) -> list[agent_pb2.FileEntry]:
    entries = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        relative = os.fsencode(Path(entry.path).relative_to(root))
        entries.append(
            agent_pb2.FileEntry(
                # A task may name files in any bytes; protobuf strings must be UTF-8.
                path=relative.decode("utf-8", "backslashreplace"),
                is_dir=entry.is_dir(follow_symlinks=False),
                size=st.st_size,
                mtime=st.st_mtime,
            )
        )
    return entries


def _read(path: Path, offset: int, length: int) -> tuple[bytes, int, int]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if offset < 0:
            offset = max(size + offset, 0)
        offset = min(offset, size)
        f.seek(offset)
        return f.read(length), offset, size
