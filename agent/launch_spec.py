"""What a task wrapper is asked to run (`LaunchSpec`) and its wire form. Standard library only.

The agent builds one `LaunchSpec` per run; every route that starts a wrapper (agent/spawners.py)
takes it. Where it crosses a process boundary it travels as JSON (`to_wire`): on the
launcher's pipe, in a one-shot wrapper's `RUN_DIR/spec.json`, and as the C wrapper's command
line and environment pipe (agent/task_wrapper.c's usage). The Python wrapper reads it back
with `from_wire`.

A NamedTuple, not a dataclass: the task wrapper imports this and starts per task where no
launcher runs, and `dataclasses` (through `inspect`) costs it about 5 ms of start-up; a
NamedTuple is just as immutable and typed. Its `env` is a dict that nobody changes once the
spec is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["LaunchSpec", "WrapperUser"]


class WrapperUser(NamedTuple):
    """Whom the wrapper starts the command as (agora.agent.task_user.TaskUser, resolved)."""

    uid: int
    gid: int
    groups: tuple[int, ...]


class LaunchSpec(NamedTuple):
    """One run's command, as its wrapper starts it."""

    argv: tuple[str, ...]
    env: dict[str, str]  # the task's whole environment: the wrapper itself runs without it
    cwd: str  # the sandbox
    stdout: str  # appended to; never through a symlink (the sandbox is the task user's)
    stderr: str
    cgroups: tuple[str, ...] = ()  # the command starts inside these, made by the agent
    user: WrapperUser | None = None  # None: the agent's own user
    # "TMP_BYTES:SANDBOXES_DIR": the command in namespaces of its own (agora agent
    # --task-namespaces; the C wrapper's --ns); "": a plain process.
    namespaces: str = ""
    # "NAME:VALUE,...": resource limits the command starts under (TaskInfo.rlimits, clamped
    # to the agent's own); "": the wrapper's.
    rlimits: str = ""

    @classmethod
    def in_sandbox(
        cls,
        argv: list[str] | tuple[str, ...],
        env: dict[str, str],
        sandbox: Path,
        cgroups: list[str] | tuple[str, ...] = (),
        user: WrapperUser | None = None,
        namespaces: str = "",
        rlimits: str = "",
    ) -> LaunchSpec:
        """The spec of a task run in `sandbox`, with its output in sandbox/stdout and stderr."""
        return cls(
            tuple(argv),
            env,
            str(sandbox),
            str(sandbox / "stdout"),
            str(sandbox / "stderr"),
            tuple(cgroups),
            user,
            namespaces,
            rlimits,
        )

    def to_wire(self) -> dict[str, Any]:
        """The JSON form, as the launcher's pipe and spec.json carry it."""
        user = self.user
        wire = {
            "argv": list(self.argv),
            "env": self.env,
            "cwd": self.cwd,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "cgroups": list(self.cgroups),
            "user": None
            if user is None
            else {"uid": user.uid, "gid": user.gid, "groups": list(user.groups)},
        }
        # Only when set: the form older wrappers and files know stays as it was.
        if self.namespaces:
            wire["namespaces"] = self.namespaces
        if self.rlimits:
            wire["rlimits"] = self.rlimits
        return wire

    @classmethod
    def from_wire(cls, data: Any) -> LaunchSpec:
        """The spec `to_wire` made; ValueError naming what is wrong with anything else."""
        try:
            user = data.get("user")
            env = data["env"]
            if not isinstance(env, dict):
                raise TypeError("env is not an object")
            return cls(
                tuple(str(arg) for arg in data["argv"]),
                env,
                str(data["cwd"]),
                str(data["stdout"]),
                str(data["stderr"]),
                tuple(str(path) for path in data.get("cgroups") or ()),
                None
                if not user
                else WrapperUser(
                    int(user["uid"]), int(user["gid"]), tuple(int(g) for g in user["groups"])
                ),
                str(data.get("namespaces") or ""),
                str(data.get("rlimits") or ""),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a launch spec: {e!r}") from None
