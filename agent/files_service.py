"""The `Agent` gRPC service: read, follow and list files in a task's sandbox; list tasks and
what they use.

Every path is relative to the task's sandbox and must stay inside it: '..' components, absolute
paths and symlinks that lead out are refused with INVALID_ARGUMENT. Paths are resolved and opened
in one step beneath the sandbox (agent.sandbox_files), so a task that swaps a directory for a
symlink while it is read cannot lead the read out; the reads then use that descriptor.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import grpc

from agora.agent.file_access import SandboxAccess, SandboxDenied
from agora.agent.sandbox_files import SandboxPathError, open_beneath, split_relative
from agora.agent.task_manager import TaskManager, TaskRun, is_terminal
from agora.agent.usage import usage_report
from agora.common.credentials import caller_principal
from agora.common.redaction import without_environments
from agora.v1 import agent_pb2, agent_pb2_grpc, common_pb2

MAX_READ = 1024 * 1024
FOLLOW_POLL_SECONDS = 0.2


class AgentFilesService(agent_pb2_grpc.AgentServicer):
    def __init__(
        self,
        tasks: TaskManager,
        pending: Callable[[str, str], list[common_pb2.TaskStatus]] | None = None,
        access: SandboxAccess | None = None,
    ) -> None:
        self._tasks = tasks
        self._access = access or SandboxAccess()
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
            raise AssertionError("unreachable: context.abort raises")
        try:
            self._access.check(caller_principal(context), run.record, run.task.task_id)
        except SandboxDenied as e:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        return run

    async def _open(self, run: TaskRun, relative: str, context, directory: bool = False) -> int:
        """A descriptor of `relative` in the run's sandbox (the caller closes it), or an abort."""
        try:
            return await asyncio.to_thread(open_beneath, run.sandbox, relative, directory)
        except SandboxPathError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except FileNotFoundError:
            kind = "a directory" if directory else "a file"
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"{relative!r} is not {kind} in the sandbox of task {run.task.task_id!r}",
            )
        except OSError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"cannot open {relative!r}: {e.strerror}"
            )
        raise AssertionError("unreachable: context.abort raises")

    async def _file(self, request, context) -> tuple[TaskRun, int]:
        run = await self._run(request, context)
        if not request.path:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "path is required, e.g. 'stdout' or 'stderr'"
            )
        return run, await self._open(run, request.path, context)

    async def ReadFile(self, request, context):
        _, fd = await self._file(request, context)
        try:
            length = request.length if request.length > 0 else MAX_READ
            length = min(length, MAX_READ)
            data, offset, size = await self._read(fd, request.offset, length, context)
        finally:
            os.close(fd)
        return agent_pb2.ReadFileResponse(data=data, offset=offset, size=size)

    async def FollowFile(self, request, context):
        run, fd = await self._file(request, context)
        try:
            offset = request.offset
            if offset < 0:
                offset = max(os.fstat(fd).st_size + offset, 0)
            while True:
                # Check before reading, so that everything written before the end is sent.
                ended = is_terminal(run.state)
                data, start, _ = await self._read(fd, offset, MAX_READ, context)
                if data:
                    yield agent_pb2.FileChunk(data=data, offset=start)
                    offset = start + len(data)
                    continue
                if ended:
                    return
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
        finally:
            os.close(fd)

    async def ListFiles(self, request, context):
        run = await self._run(request, context)
        fd = await self._open(run, request.path, context, directory=True)
        try:
            # In a thread: a task may leave thousands of files, and the loop serves every task.
            prefix = split_relative(request.path)
            entries = await asyncio.to_thread(_list, fd, prefix)
        except OSError as e:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"cannot list {request.path!r}: {e}"
            )
        finally:
            os.close(fd)
        return agent_pb2.ListFilesResponse(files=entries)

    async def _read(self, fd: int, offset: int, length: int, context):
        """_read in a thread; the task owns its sandbox, so its files may change at any time."""
        try:
            return await asyncio.to_thread(_read, fd, offset, length)
        except OSError as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot read it: {e}")

    async def GetUsage(self, request, context):
        runs = [
            run
            for run in self._tasks.runs()
            if not is_terminal(run.state)
            and run.wrapper is not None
            and (not request.task_id or run.task.task_id == request.task_id)
            and (not request.framework_id or run.record.framework_id == request.framework_id)
        ]
        if request.task_id and not runs:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no running task {request.task_id!r} on this agent"
            )
        principal = caller_principal(context)
        if request.task_id:
            try:
                for run in runs:
                    self._access.check(principal, run.record, run.task.task_id)
            except SandboxDenied as e:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        else:  # the whole agent: only the tasks the caller may see
            runs = [run for run in runs if self._access.allowed(principal, run.record)]
        # In a thread: the sandbox walks grow with the tasks' file counts.
        return await asyncio.to_thread(usage_report, runs)

    async def ListTasks(self, request, context):
        # Every run the agent remembers: running, ended (with updates still to acknowledge),
        # and the recent completed ones whose sandboxes can still be read.
        out = []
        principal = caller_principal(context)
        for run in self._tasks.runs():
            task = run.task
            if not self._access.allowed(principal, run.record):
                task = without_environments(task)  # it may hold another framework's secrets
            out.append(
                agent_pb2.AgentTask(
                    framework_id=run.record.framework_id,
                    task=task,
                    state=run.state,
                    sandbox=str(run.sandbox),
                    pid=run.wrapper.task_pid if run.wrapper is not None else 0,
                    unacknowledged_updates=len(
                        self._pending(run.record.framework_id, run.task.task_id)
                    ),
                )
            )
        return agent_pb2.ListAgentTasksResponse(tasks=out)


def _list(directory_fd: int, prefix: list[str]) -> list[agent_pb2.FileEntry]:
    entries = []
    # scandir of a descriptor: entries are read from the opened directory, never from a path
    # the task could have swapped meanwhile.
    for entry in sorted(os.scandir(directory_fd), key=lambda e: e.name):
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        relative = os.fsencode("/".join([*prefix, entry.name]))
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


def _read(fd: int, offset: int, length: int) -> tuple[bytes, int, int]:
    size = os.fstat(fd).st_size
    if offset < 0:
        offset = max(size + offset, 0)
    offset = min(offset, size)
    return os.pread(fd, length, offset), offset, size
