"""The limits a task must be within for the master to launch it: shared by the master, which
refuses an Accept past them, and the frameworks, which check a job or an app against the same
numbers when it is submitted rather than find out at launch time. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from agora.common.request_limits import MAX_ID_LENGTH, MAX_NAME_LENGTH, LimitError, check_text

__all__ = [
    "MAX_COMMAND_BYTES",
    "MAX_ENVIRONMENT_BYTES",
    "MAX_LABELS",
    "MAX_LABEL_VALUE_LENGTH",
    "MAX_TASKS_PER_ACCEPT",
    "MIN_TASK_CPUS",
    "RLIMITS",
    "check_labels",
    "check_rlimits",
    "check_task_size",
]

MAX_TASKS_PER_ACCEPT = 1000  # tasks one Accept may launch (on one agent)
MAX_LABEL_VALUE_LENGTH = 4096
MAX_LABELS = 64
MAX_COMMAND_BYTES = 64 * 1024  # a task's command line (argv or shell), all told
MAX_ENVIRONMENT_BYTES = 64 * 1024  # a task's environment variables, all told
# The smallest cpus a task may ask for: less rounds to nothing in resource arithmetic, and
# thousands of such tasks would fit on one agent for free (Mesos' minimum allocatable cpus).
MIN_TASK_CPUS = 0.001


# The resource limits a task may set lower (TaskInfo.rlimits): Unix's RLIMIT_<NAME>.
RLIMITS = ("as", "core", "cpu", "data", "fsize", "memlock", "nofile", "nproc", "stack")


def check_rlimits(rlimits: Mapping[str, int], where: str = "task") -> None:
    """Known names only; LimitError naming the others."""
    unknown = sorted(set(rlimits) - set(RLIMITS))
    if unknown:
        raise LimitError(
            f"{where}: rlimits: unknown {', '.join(repr(n) for n in unknown)}; use "
            f"{', '.join(RLIMITS)}"
        )


def check_labels(labels: Mapping[str, str]) -> None:
    if len(labels) > MAX_LABELS:
        raise LimitError(f"labels: {len(labels)} entries; the limit is {MAX_LABELS} per call")
    for key, value in labels.items():
        check_text("label key", key)
        check_text(f"label {key[:40]!r}", value, MAX_LABEL_VALUE_LENGTH)


def check_task_size(task) -> None:
    """A TaskInfo's ids, names, command and environment within the limits; LimitError naming
    the field otherwise."""
    check_text("task_id", task.task_id, MAX_ID_LENGTH)
    where = f"task {task.task_id}"
    check_text(f"{where}: name", task.name, MAX_NAME_LENGTH)
    check_text(f"{where}: command.user", task.command.user, MAX_NAME_LENGTH)
    command = len(task.command.shell.encode()) + sum(len(a.encode()) for a in task.command.argv)
    if command > MAX_COMMAND_BYTES:
        raise LimitError(f"{where}: command: {command} bytes; the limit is {MAX_COMMAND_BYTES}")
    environment = sum(len(k) + len(v) for k, v in task.command.environment.items())
    if environment > MAX_ENVIRONMENT_BYTES:
        raise LimitError(
            f"{where}: command.environment: {environment} bytes; the limit is "
            f"{MAX_ENVIRONMENT_BYTES}"
        )
    check_labels(task.labels)
    check_rlimits(task.rlimits, where)
    for r in task.resources:
        if r.name == "cpus" and 0 < r.scalar < MIN_TASK_CPUS:
            raise LimitError(
                f"{where}: asks for cpus {r.scalar:g}; the smallest a task may ask for is "
                f"{MIN_TASK_CPUS:g}"
            )
