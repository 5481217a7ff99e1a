"""Tasks from images: the step between a task and its wrapper that puts the command in a
container (issue 35). A plain task goes by unchanged.

For a task with `container.image`, the agent writes an OCI bundle in the run's directory
(config.json from agent/oci.py; the root filesystem is the image's, shared read-only) and the
wrapper runs `runc run` on it instead of the command: as the agent's user (the runtime needs
root to make namespaces and mounts), inside the task's cgroups. The container's cgroup path is
relative, so runc nests it in the cgroups it starts in: the task's limits (memory, CPU, pids)
bound it, its OOM kills count there, and the agent's and the wrapper's kills and clean-up reach
into it (agent/cgroup_members.py). The command runs as the task's Unix user inside. runc's
state is in the run's directory, and goes with it.

Why runc (Debian's `runc`) and not crun: crun 1.8 (Debian 12) refuses to start on a host whose
cgroup v2 hierarchy holds a controller next to v1 ones (this machine's hugetlb), and has no way
around it; runc runs on v1, hybrid and v2 hosts alike. It costs a Go start-up per task (about
30 ms of wall time here). `agora agent --container-runtime PATH` picks another OCI runtime that
takes runc's command line (crun does, on hosts where it starts).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from agora.agent.images import Image, ImageError, ImageStore
from agora.agent.oci import SANDBOX, runtime_config
from agora.agent.task_env import DEFAULT_PATH
from agora.agent.task_user import TaskUser
from agora.v1 import common_pb2

__all__ = ["ContainerError", "Containers"]

MB = 1024 * 1024
DEFAULT_TMP_MB = 64  # a container's /tmp when its task names no disk


class ContainerError(Exception):
    """Why a task's container cannot start, in words for its status."""


class Containers:
    """Makes tasks' containers from the images in `store`; `runtime`: the OCI runtime's path
    (None: runc, found on PATH when first needed)."""

    def __init__(
        self,
        store: ImageStore,
        runtime: str | None = None,
        init: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`init`: the static binary each container runs as its pid 1 (the C task wrapper's
        --init), or None: the command is pid 1 itself."""
        self.store = store
        self._runtime = runtime
        self._init = init

    @property
    def runtime(self) -> str | None:
        if self._runtime is None:
            self._runtime = shutil.which("runc")
        return self._runtime

    def describe(self) -> str:
        """For the agent's start line: what runs images here."""
        return self.runtime or "none (install runc to run tasks from images)"

    def wrap(
        self,
        run_dir: Path,
        run_id: str,
        task: common_pb2.TaskInfo,
        argv: list[str],
        env: dict[str, str],
        sandbox: Path,
        user: TaskUser | None,
        disk_mb: float = 0.0,
        devices: list[str] | None = None,
        rlimits: dict[str, int] | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """What the wrapper runs instead of `argv` with `env`: the runtime on a bundle written now.
        ContainerError when the image is missing or no runtime is installed."""
        if self.runtime is None:
            raise ContainerError("this agent cannot run images: runc is not installed")
        try:
            image = self.store.get(task.container.image)
        except ImageError as e:
            raise ContainerError(str(e)) from None
        network = task.container.network or "host"
        if network not in ("host", "none"):
            raise ContainerError(f"container.network {network!r}: use host or none")
        bundle = run_dir / "bundle"
        bundle.mkdir(exist_ok=True)
        uid, gid, groups = _ids(user)
        config = runtime_config(
            argv=container_argv(image, task, argv),
            env=container_env(image, env, task),
            rootfs=image.rootfs,
            sandbox=str(sandbox),
            uid=uid,
            gid=gid,
            groups=groups,
            hostname=task.task_id[:63] or "task",
            network=network,
            tmp_bytes=int((disk_mb if disk_mb > 0 else DEFAULT_TMP_MB) * MB),
            # Relative: nested in the cgroups the runtime starts in, the task's.
            cgroups_path=f"container-{run_id}",
            devices=[_char_device(path) for path in devices or []],
            rlimits={f"RLIMIT_{name.upper()}": value for name, value in (rlimits or {}).items()},
            init=self._init(),
        )
        (bundle / "config.json").write_text(json.dumps(config))
        wrapped = [
            self.runtime,
            "--root",
            str(run_dir / "runtime"),
            "run",
            "--bundle",
            str(bundle),
            "--no-new-keyring",
            run_id,
        ]
        return wrapped, {"PATH": DEFAULT_PATH}


def container_argv(image: Image, task: common_pb2.TaskInfo, argv: list[str]) -> list[str]:
    """The command inside: a shell command as /bin/sh -c in the image; argv after the image's
    entrypoint (as Docker and Marathon take a container's args). Pure."""
    if task.command.shell:
        return argv  # ["/bin/sh", "-c", shell]: the image's shell
    return [*image.entrypoint, *argv]


def container_env(image: Image, env: dict[str, str], task: common_pb2.TaskInfo) -> dict[str, str]:
    """The image's environment, then the task's (Agora's variables and the command's), with
    the sandbox where the container sees it and the image's PATH unless the command sets one.
    Pure."""
    inside = dict(item.split("=", 1) for item in image.env if "=" in item)
    for name, value in env.items():
        if name == "PATH" and "PATH" in inside and name not in task.command.environment:
            continue
        inside[name] = value
    inside["AGORA_SANDBOX"] = SANDBOX
    inside["MESOS_SANDBOX"] = SANDBOX
    inside["HOME"] = task.command.environment.get("HOME", SANDBOX)
    inside.setdefault("PATH", DEFAULT_PATH)
    return inside


def _char_device(path: str) -> tuple[str, int, int]:
    """(path, major, minor) of a device node the container gets (its GPUs')."""
    rdev = os.stat(path).st_rdev
    return path, os.major(rdev), os.minor(rdev)


def _ids(user: TaskUser | None) -> tuple[int, int, list[int]]:
    if user is None:
        return os.getuid(), os.getgid(), []
    wrapper = user.wrapper_user()
    return wrapper.uid, wrapper.gid, list(wrapper.groups)


__all__ += ["container_argv", "container_env", "ImageError"]
