"""Task helpers: unique task ids, CommandInfo from a shell string or argv, readable states."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agora.common import new_id
from agora.v1 import common_pb2

TaskState = common_pb2.TaskState


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

CommandLike = common_pb2.CommandInfo | str | Sequence[str]


def new_task_id(prefix: str = "task") -> str:
    """`new_task_id("hello")` -> 'hello-3f9c1a2b7d4e': unique, and readable in logs.

    Characters other than letters, digits, `_`, `.` and `-` in the prefix become `-`, so a task
    name with spaces still makes an id that is safe in a file name (the agent's sandbox).
    """
    clean = _UNSAFE.sub("-", prefix).strip("-") or "task"
    return new_id(clean)


def shell_command(script: str, env: Mapping[str, str] | None = None) -> common_pb2.CommandInfo:
    """A command run by `/bin/sh -c script` on the agent."""
    if not script.strip():
        raise ValueError("a shell command must not be empty")
    return common_pb2.CommandInfo(shell=script, environment=dict(env or {}))


def argv_command(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> common_pb2.CommandInfo:
    """A command exec'd directly (no shell): argv[0] is the program."""
    if isinstance(argv, str):
        raise TypeError("argv must be a list of strings; use shell_command() for a string")
    if not argv or not argv[0]:
        raise ValueError("argv must name a program")
    return common_pb2.CommandInfo(argv=list(argv), environment=dict(env or {}))


def as_command(
    command: CommandLike, env: Mapping[str, str] | None = None
) -> common_pb2.CommandInfo:
    """A string is a shell command, a list is argv, a CommandInfo is copied; `env` is added."""
    out = common_pb2.CommandInfo()
    fill_command(out, command, env)
    return out


def fill_command(
    out: common_pb2.CommandInfo, command: CommandLike, env: Mapping[str, str] | None = None
) -> None:
    """as_command(), written into `out` (an empty CommandInfo, e.g. a new TaskInfo's): no
    message made to be copied in."""
    if isinstance(command, common_pb2.CommandInfo):
        out.CopyFrom(command)
        if env:
            out.environment.update(env)
        if not out.argv and not out.shell:
            raise ValueError("the CommandInfo has neither argv nor shell")
    elif isinstance(command, str):
        if not command.strip():
            raise ValueError("a shell command must not be empty")
        out.shell = command
        if env:
            out.environment.update(env)
    else:
        out.CopyFrom(argv_command(command, env))


def state_name(state: int) -> str:
    """TASK_FINISHED -> 'FINISHED'."""
    try:
        name = common_pb2.TaskState.Name(state)
    except ValueError:
        return f"STATE_{state}"
    return name.removeprefix("TASK_")


def describe_status(status: common_pb2.TaskStatus) -> str:
    """One readable line: 'hello-3f9c FINISHED on agent-1a2b: exited with code 0'."""
    line = f"{status.task_id} {state_name(status.state)}"
    if status.agent_id:
        line += f" on {status.agent_id}"
    detail = status.message or status.reason
    if detail:
        line += f": {detail}"
    return line
