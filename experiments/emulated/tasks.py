"""How long an emulated task "runs": read from the task itself, else from the fleet's default.

A load framework says how long each task should take, so the same task runs the same time on
an emulated agent and on a real one: the label `agora.emulated/duration` (seconds) wins, else a
command of the shape `sleep SECONDS` (shell or argv). Label `agora.emulated/exit-code` makes the
task fail with that code.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from agora.v1 import common_pb2

DURATION_LABEL = "agora.emulated/duration"
EXIT_CODE_LABEL = "agora.emulated/exit-code"

Sampler = Callable[[], float]


def constant(seconds: float) -> Sampler:
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a duration must be 0 or more seconds, got {seconds}")
    return lambda: seconds


def exponential(mean: float, rng: random.Random | None = None) -> Sampler:
    if not (math.isfinite(mean) and mean > 0):
        raise ValueError(f"an exponential duration needs a positive mean, got {mean}")
    rng = rng or random.Random()
    return lambda: rng.expovariate(1.0 / mean)


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def declared_duration(task: common_pb2.TaskInfo) -> float | None:
    """The duration the task asks for, or None when it names none."""
    if DURATION_LABEL in task.labels:
        return _seconds(task.labels[DURATION_LABEL])
    words = list(task.command.argv) or task.command.shell.split()
    if len(words) == 2 and words[0] in ("sleep", "/bin/sleep", "/usr/bin/sleep"):
        return _seconds(words[1])
    return None


def exit_code(task: common_pb2.TaskInfo) -> int:
    try:
        return int(task.labels.get(EXIT_CODE_LABEL, "0"))
    except ValueError:
        return 0


def has_command(task: common_pb2.TaskInfo) -> bool:
    return bool(task.command.shell.strip() or list(task.command.argv))
