"""What the agent keeps in its work dir to survive a restart: its id, task runs, status updates.

Layout under the work dir:
    meta/agent_id                 the id the master gave this agent
    meta/updates.jsonl            status updates and acknowledgements, append-only
    meta/runs/<run_id>/task.json  one task run: its TaskInfo, sandbox, state, wrapper pid
    meta/runs/<run_id>/...        the wrapper's spec, pid and exit files (see agora.agent.executor)
    sandboxes/<framework_id>/<task_id>/   the task's working directory, stdout and stderr
Every whole-file write is atomic (temp file, fsync, rename), so a crash leaves the old or the
new version, never half of one.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agora.agent.atomic_files import atomic_write_json, overwrite_json, reserve_json
from agora.agent.task_user import TaskUser
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)


def read_json(path: str | os.PathLike) -> dict | None:
    """The parsed file, or None if it is missing or unreadable (a torn write of an old agent)."""
    try:
        data = json.loads(_read_small(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("unreadable checkpoint file", path=str(path), error=str(e))
        return None
    return data if isinstance(data, dict) else None


def _read_small(path: str | os.PathLike) -> bytes:
    """A whole file with os-level calls (the agent reads a few small ones a task)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


@dataclass
class TaskRecord:
    """The checkpointed facts about one run of a task."""

    run_id: str
    framework_id: str
    task: str  # TaskInfo, serialized and base64-encoded
    sandbox: str
    state: common_pb2.TaskState = common_pb2.TASK_STAGING
    launched_at: float = 0.0
    killing: bool = False
    kill_grace: float = 0.0
    # Set once the terminal update is acknowledged: kept only so its files can still be read.
    completed: bool = False
    # The task's cgroup directories (agora.agent.isolation); empty without cgroups.
    cgroups: list[str] = field(default_factory=list)
    # The CPU seconds [user, system] those cgroups counted before this run (kept ones).
    cgroup_cpu_base: list[float] = field(default_factory=list)
    # The Unix user the task runs as when not the agent's own (agora.agent.task_user).
    user: str = ""
    # Set when the agent killed the task for exceeding a limit: [reason, message].
    limitation: list[str] = field(default_factory=list)
    # Set when the master killed it for a reason of its own (a drain's deadline passed):
    # [reason, message], for its TASK_KILLED status.
    kill_reason: list[str] = field(default_factory=list)
    # Who subscribed the task's framework, and its name: they decide who reads the sandbox.
    framework_principal: str = ""
    framework_name: str = ""
    # The GPUs the run holds (device indices, agora.agent.gpus): taken until it ends.
    gpus: list[str] = field(default_factory=list)

    def task_info(self) -> common_pb2.TaskInfo:
        return common_pb2.TaskInfo.FromString(unb64(self.task))


def images_in_use(root: Path) -> dict[str, list[str]]:
    """The images that tasks not yet ended use, by the records in the work dir at `root`
    (read only: `agora agent image rm` asks it while the agent may run): {image: [task ids]}."""
    from agora.common.task_states import is_terminal

    used: dict[str, list[str]] = {}
    runs = Path(root) / "meta" / "runs"
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        data = read_json(run_dir / "task.json")
        if data is None or is_terminal(data.get("state", 0)):
            continue
        try:
            task = common_pb2.TaskInfo.FromString(unb64(data["task"]))
        except (KeyError, ValueError, TypeError):
            continue
        if task.container.image:
            used.setdefault(task.container.image, []).append(task.task_id)
    return used


class WorkDir:
    """Paths and checkpoint files inside the agent's work dir."""

    def __init__(self, root: Path) -> None:
        # Absolute: a task's wrapper and its container runtime resolve these paths from the
        # sandbox or the bundle, not from the agent's working directory.
        self.root = Path(root).absolute()
        self.meta = self.root / "meta"
        self.runs = self.meta / "runs"
        self.sandboxes = self.root / "sandboxes"
        self.updates_log = self.meta / "updates.jsonl"
        # Present while no agent watches this work dir's tasks: a wrapper whose task ends then
        # removes the task's cgroups itself (agent/task_wrapper.c, agent/executor.py).
        self.unwatched = self.meta / "unwatched"
        self._runs, self._sandboxes = str(self.runs), str(self.sandboxes)
        self._lock_fd: int | None = None
        for path in (self.meta, self.runs, self.sandboxes):
            path.mkdir(parents=True, exist_ok=True)
        # Tasks may run as other users: the agent's records (task environments included) are
        # its own, and sandboxes/ can be crossed but not listed; each sandbox is its task's.
        os.chmod(self.meta, 0o700)
        os.chmod(self.sandboxes, 0o711)

    # exclusive use ------------------------------------------------------------------------

    def lock(self) -> None:
        """Claims the work dir for this process; OSError if another agent is using it.

        Two agents on one work dir would each re-attach to the other's tasks and interleave
        their update logs. The lock is released when the process exits, however it exits.
        """
        fd = os.open(self.meta / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise OSError(
                f"work dir {self.root} is in use by another agent (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # agent id ---------------------------------------------------------------------------

    def load_agent_id(self) -> str:
        try:
            return (self.meta / "agent_id").read_text().strip()
        except FileNotFoundError:
            return ""

    def save_agent_id(self, agent_id: str) -> None:
        path = self.meta / "agent_id"
        if not agent_id:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(".agent_id.tmp")
        with open(tmp, "w") as f:
            f.write(agent_id + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    # task runs ----------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> Path:
        return self.runs / run_id

    def run_path(self, run_id: str, name: str = "") -> str:
        """The run's directory, or a file `name` in it, as a string: the per-task paths are
        built several times a task, and a str join costs a tenth of pathlib's."""
        return f"{self._runs}/{run_id}/{name}" if name else f"{self._runs}/{run_id}"

    def new_sandbox(self, framework_id: str, task_id: str, owner: TaskUser | None = None) -> Path:
        """`sandboxes/<fw>/<task_id>/`, or `<task_id>.N/` when the id was run here before.

        Mode 0700, owned by `owner` when the task runs as another user than the agent's: no
        other task's user can read it.
        """
        parent = f"{self._sandboxes}/{framework_id}"
        candidate, n, made_parent = f"{parent}/{task_id}", 1, False
        while True:
            try:
                os.mkdir(candidate, 0o700)
            except FileExistsError:
                n += 1
                candidate = f"{parent}/{task_id}.{n}"
                continue
            except FileNotFoundError:
                if made_parent:
                    raise  # removed again at once: something else is at work in there
                # The framework's first task here (or its directory was removed since).
                Path(parent).mkdir(mode=0o711, parents=True, exist_ok=True)
                made_parent = True
                continue
            # There from the start, so a client may follow them before the command runs.
            files = (f"{candidate}/stdout", f"{candidate}/stderr")
            for path in files:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666))
            if owner is not None:
                for path in (candidate, *files):
                    os.chown(path, owner.uid, owner.gid)
            return Path(candidate)

    def prepare_run(self, record: TaskRecord) -> None:
        """The run's directory with its record, and the room its wrapper writes into later."""
        run_dir = self.run_path(record.run_id)
        try:
            os.mkdir(run_dir)
        except FileExistsError:
            pass
        except FileNotFoundError:  # runs/ itself was removed
            Path(run_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(f"{run_dir}/task.json", vars(record), durable=False)
        for name in ("wrapper.json", "exit.json"):
            reserve_json(f"{run_dir}/{name}")

    # What a run's directory holds once its wrapper is done (agora.agent.executor's files).
    RUN_FILES = ("task.json", "wrapper.json", "exit.json", "spec.json", "executor.log")

    def remove_run(self, run_id: str) -> None:
        """Removes a run's directory: its known files one by one (a completed run is trimmed
        every task, and rmtree's walk costs several times more), whatever else by a walk."""
        for name in self.RUN_FILES:
            try:
                os.unlink(self.run_path(run_id, name))
            except FileNotFoundError:
                pass
            except OSError:
                break
        run_dir = self.run_path(run_id)
        try:
            os.rmdir(run_dir)
        except FileNotFoundError:
            pass
        except OSError:  # something else in it (a leftover temp file, say)
            shutil.rmtree(run_dir, ignore_errors=True)

    def discard_run(self, record: TaskRecord) -> None:
        """Removes what prepare_run and new_sandbox made of a run that never started."""
        for path in (self.run_dir(record.run_id), Path(record.sandbox) if record.sandbox else None):
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)

    def save_record(self, record: TaskRecord, durable: bool = True) -> None:
        """Writes the run's record; `durable=False` may rewrite it in place (see overwrite_json)."""
        path = self.run_path(record.run_id, "task.json")
        # vars(), not asdict(): the fields are flat, and asdict's deep copy was most of the cost
        # of the saves every task makes.
        data = vars(record)
        if not durable and overwrite_json(path, data):
            return
        self.run_dir(record.run_id).mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, data, durable=durable)

    def load_records(self) -> list[TaskRecord]:
        out = []
        for run_dir in sorted(self.runs.iterdir()):
            data = read_json(run_dir / "task.json")
            if data is None:
                continue
            try:
                out.append(TaskRecord(**data))
            except TypeError as e:
                log.warning("skipping unreadable task record", run_dir=str(run_dir), error=str(e))
        return out
