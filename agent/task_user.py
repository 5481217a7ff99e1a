"""Which Unix user a task runs as, resolved on the agent's host. Standard library only.

A task runs as its command's `user`, else its framework's `user` (Mesos' CommandInfo.user and
FrameworkInfo.user). Whether that user is allowed is the master's decision (its ACLs); the agent
only resolves the name and says when it cannot switch to it. An agent running as root starts
the task with the user's uid, gid and groups; an agent running as anyone else can only run
tasks as itself, and refuses others with a message that says so instead of running them as the
wrong user.
"""

from __future__ import annotations

import functools
import os
import pwd
from dataclasses import dataclass

from agora.agent.launch_spec import WrapperUser

__all__ = ["TaskUser", "TaskUserError", "resolve_task_user"]


class TaskUserError(ValueError):
    """A task user this agent cannot run the task as; the message says why and what to do."""


@dataclass(frozen=True)
class TaskUser:
    """A user other than the agent's own, to switch to when starting the task."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def wrapper_user(self) -> WrapperUser:
        """Whom the wrapper starts the command as, in the launch spec."""
        return WrapperUser(self.uid, self.gid, self.groups)


@functools.cache
def _user_name(uid: int) -> str | None:
    """The name of `uid` (the agent's own, looked up once)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def resolve_task_user(name: str) -> TaskUser | None:
    """The user to switch to, or None to run as the agent's own user (no name, or the same)."""
    if not name or name == _user_name(os.geteuid()):
        return None  # the common case, without a lookup in the user database every task
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise TaskUserError(f"no Unix user {name!r} on this agent's host") from None
    me = os.geteuid()
    if entry.pw_uid == me:
        return None
    if me != 0:
        mine = pwd.getpwuid(me).pw_name
        raise TaskUserError(
            f"the agent runs as {mine!r} and cannot start tasks as {name!r}: run the agent as "
            f"root to run tasks as other users, or run this task as {mine!r}"
        )
    return TaskUser(
        name=name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(os.getgrouplist(name, entry.pw_gid)),
        home=entry.pw_dir,
    )
