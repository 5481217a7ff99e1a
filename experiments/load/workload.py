"""What a load framework asks for: task shapes, durations and when tasks arrive.

Durations are constant, exponential, or come from a CSV trace with the columns
`submit_time,duration,cpus,mem` (seconds since the framework started; MB), one task a row.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Sampler = Callable[[], float]


@dataclass(frozen=True)
class TraceTask:
    submit_time: float
    duration: float
    cpus: float
    mem: float


def constant(seconds: float) -> Sampler:
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a duration must be 0 or more seconds, got {seconds}")
    return lambda: seconds


def exponential(mean: float, seed: int | None = None) -> Sampler:
    if not (math.isfinite(mean) and mean > 0):
        raise ValueError(f"an exponential duration needs a positive mean, got {mean}")
    rng = random.Random(seed)
    return lambda: rng.expovariate(1.0 / mean)


def parse_duration(text: str, seed: int | None = None) -> Sampler:
    """`2`, `constant:2` or `exp:2` (exponential, mean 2 s)."""
    kind, sep, value = text.partition(":")
    if not sep:
        kind, value = "constant", text
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: write SECONDS, constant:SECONDS or exp:MEAN") from None
    if kind == "constant":
        return constant(number)
    if kind in ("exp", "exponential"):
        return exponential(number, seed)
    raise ValueError(f"{text!r}: unknown distribution {kind!r}; use constant or exp")


def load_trace(path: Path | str) -> list[TraceTask]:
    """Reads a CSV trace (a header row naming submit_time,duration,cpus,mem), sorted by time."""
    tasks = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"submit_time", "duration", "cpus", "mem"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: the header lacks {', '.join(sorted(missing))}")
        for line, row in enumerate(reader, start=2):
            try:
                task = TraceTask(
                    float(row["submit_time"]),
                    float(row["duration"]),
                    float(row["cpus"]),
                    float(row["mem"]),
                )
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: not four numbers: {row}") from None
            if min(task.submit_time, task.duration, task.cpus, task.mem) < 0 or not all(
                math.isfinite(v) for v in (task.submit_time, task.duration, task.cpus, task.mem)
            ):
                raise ValueError(f"{path}:{line}: values must be finite and not negative")
            tasks.append(task)
    tasks.sort(key=lambda t: t.submit_time)
    return tasks
