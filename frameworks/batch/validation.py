"""Checks a submitted JobSpec at the edge, before anything is stored. Pure."""

from __future__ import annotations

import functools
import math
import shlex

from agora.common import UNRESERVED, Resources
from agora.frameworks.sdk.constraints import Constraint, ConstraintError, check_pattern_budget
from agora.v1 import batch_pb2

MAX_INSTANCES = 10_000
MAX_RETRIES = 1_000
MAX_PORTS = 1_000
MAX_CONSTRAINTS = 32
MAX_INSTANCE_ARG_BYTES = 4096  # one instance's arguments
MAX_INSTANCE_ARGS_BYTES = 4 * 1024 * 1024  # all of a job's (a 10,000-line file of paths)


class SpecError(ValueError):
    """The spec is malformed; the message says what to change."""


def validate_spec(spec: batch_pb2.JobSpec, framework_role: str = UNRESERVED) -> None:
    """Raises SpecError naming the first problem of `spec`."""
    if not 1 <= spec.instances <= MAX_INSTANCES:
        raise SpecError(f"instances must be between 1 and {MAX_INSTANCES}, got {spec.instances}")
    task = spec.task
    command = task.command
    if command.argv and command.shell:
        raise SpecError("the command has both argv and shell; give exactly one")
    if command.argv:
        if not command.argv[0].strip():
            raise SpecError("the command's argv[0] (the program) is empty")
    elif not command.shell.strip():
        raise SpecError("the job has no command: give a shell string or an argv list")
    for name, value in (("cpus", task.cpus), ("mem", task.mem)):
        if not math.isfinite(value) or value <= 0:
            raise SpecError(f"{name} must be a positive number, got {value:g}")
    for name, value in (
        ("disk", task.disk),
        ("kill_grace_period_seconds", task.kill_grace_period_seconds),
        ("duration_seconds", spec.duration_seconds),
        ("time_limit_seconds", spec.time_limit_seconds),
        ("begin_at", spec.begin_at),
    ):
        if not math.isfinite(value) or value < 0:
            raise SpecError(f"{name} must be 0 or a positive number, got {value:g}")
    if round(task.cpus, 3) <= 0 or round(task.mem, 3) <= 0:
        raise SpecError("cpus and mem must be at least 0.001")
    if task.ports > MAX_PORTS:
        raise SpecError(f"ports is a count of ports per instance, at most {MAX_PORTS}")
    if spec.gang and spec.max_running and spec.max_running < spec.instances:
        raise SpecError(
            f"a gang of {spec.instances} instances runs all at once: --max-running "
            f"{spec.max_running} would never let it start"
        )
    if spec.max_retries > MAX_RETRIES:
        raise SpecError(f"max_retries must be at most {MAX_RETRIES}, got {spec.max_retries}")
    for key in list(task.env) + list(command.environment):
        if not key or "=" in key or "\0" in key:
            raise SpecError(f"environment variable name {key!r} is not valid")
    if len(spec.owner) > 256:
        raise SpecError("owner: at most 256 characters")
    if spec.instance_args:
        check_instance_args(spec)
    if not math.isfinite(task.gpus) or task.gpus < 0:
        raise SpecError(f"gpus must be 0 or more, got {task.gpus:g}")
    if spec.constraints:
        try:
            check_pattern_budget(constraints_of(spec), "the job")
        except ConstraintError as e:
            raise SpecError(str(e)) from None
    if task.role not in ("", UNRESERVED, framework_role):
        raise SpecError(
            f"role {task.role!r}: the batch framework runs in role "
            f"{framework_role!r}; a job may use that role or '*'"
        )


def needs(spec: batch_pb2.JobSpec) -> Resources:
    """One instance's scalar needs, for messages."""
    task = spec.task
    amounts = {"cpus": task.cpus, "mem": task.mem, "disk": task.disk, "gpus": task.gpus}
    return Resources.of(UNRESERVED, **{k: round(v, 3) for k, v in amounts.items() if v > 0})


def describe_needs(spec: batch_pb2.JobSpec) -> str:
    text = needs(spec).format()
    if spec.task.ports:
        text += f";ports:{spec.task.ports}"
    return text


def check_instance_args(spec: batch_pb2.JobSpec) -> None:
    args = spec.instance_args
    if len(args) != spec.instances:
        raise SpecError(
            f"{len(args)} per-instance arguments for {spec.instances} instances: give one "
            "per instance (or leave --instances out to take the count from the file)"
        )
    total = 0
    for index, text in enumerate(args):
        size = len(text.encode())
        total += size
        if size > MAX_INSTANCE_ARG_BYTES or "\0" in text:
            raise SpecError(
                f"instance {index}'s arguments: at most {MAX_INSTANCE_ARG_BYTES} bytes, no NUL"
            )
        try:
            shlex.split(text)
        except ValueError as e:
            raise SpecError(f"instance {index}'s arguments {text[:40]!r}: {e}") from None
    if total > MAX_INSTANCE_ARGS_BYTES:
        raise SpecError(
            f"per-instance arguments: {total} bytes; the limit is {MAX_INSTANCE_ARGS_BYTES}"
        )


def constraints_of(spec: batch_pb2.JobSpec) -> tuple[Constraint, ...]:
    """The job's constraints, parsed (ConstraintError, a SpecError too, says what is wrong);
    parsing is cached, so placement may call this every round."""
    if len(spec.constraints) > MAX_CONSTRAINTS:
        raise SpecError(f"{len(spec.constraints)} constraints; at most {MAX_CONSTRAINTS}")
    return _parsed(tuple((c.field, c.operator, c.value) for c in spec.constraints))


@functools.lru_cache(maxsize=1024)
def _parsed(triples: tuple[tuple[str, str, str], ...]) -> tuple[Constraint, ...]:
    try:
        return tuple(Constraint.parse(*t) for t in triples)
    except ConstraintError as e:
        raise SpecError(str(e)) from None
