"""The workload trace of `agora experiment simulate`: a documented file, read and written here.

A trace is a JSON Lines file (one JSON object per line; blank lines and lines starting with
`#` are skipped). The first object describes the cluster, every other one is a job:

    {"agora_trace": 1, "agents": 100, "agent": {"cpus": 8, "mem": 32768},
     "roles": {"service": 2, "batch": 1}, "seconds": 3600}
    {"job": "j1", "at": 0.5, "role": "batch", "tasks": 10, "cpus": 0.5, "mem": 256,
     "duration": 42.0, "priority": 0}

Cluster: `agents` machines of the same `agent` resources (cpus, mem, optionally disk and
gpus); `roles`: each role's DRF weight (one framework per role submits that role's jobs);
`seconds`: how long the trace lasts (arrivals are within it; running work may outlast it).

Job: `job` a unique name; `at` its arrival, seconds from the start; `role` one of the roles;
`tasks` how many identical tasks; `cpus`, `mem` (MB), optional `disk` and `gpus`, per task;
`duration` seconds each task runs once started; `priority` (optional, default 0): a higher
one is served first by its role's framework (the batch framework's "priority" queue policy).

Every field is checked on reading; an error names the line, the field and what to write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FORMAT_VERSION", "Cluster", "Job", "Trace", "TraceError", "read_trace", "write_trace"]

FORMAT_VERSION = 1
RESOURCE_NAMES = ("cpus", "mem", "disk", "gpus")
MAX_TASKS_PER_JOB = 1_000_000


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line and what to change."""


@dataclass(frozen=True)
class Cluster:
    agents: int
    agent: dict[str, float]  # resources of each agent, e.g. {"cpus": 8, "mem": 32768}
    roles: dict[str, float]  # role -> DRF weight
    seconds: float

    @property
    def capacity(self) -> dict[str, float]:
        """The whole cluster's resources, per resource name."""
        return {name: amount * self.agents for name, amount in self.agent.items()}


@dataclass(frozen=True)
class Job:
    job: str
    at: float
    role: str
    tasks: int
    resources: dict[str, float]  # per task
    duration: float
    priority: int = 0

    @property
    def cpus(self) -> float:
        return self.resources.get("cpus", 0.0)


@dataclass
class Trace:
    cluster: Cluster
    jobs: list[Job] = field(default_factory=list)  # in arrival order

    @property
    def tasks(self) -> int:
        return sum(j.tasks for j in self.jobs)


def _number(where: str, obj: dict, name: str, *, minimum: float = 0.0, default=None) -> float:
    value = obj.get(name, default)
    if value is None:
        raise TraceError(f"{where}: field {name!r} is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: {name} must be a number, got {value!r}")
    if value < minimum:
        raise TraceError(f"{where}: {name} must be at least {minimum:g}, got {value!r}")
    return float(value)


def _whole(where: str, obj: dict, name: str, minimum: int, maximum: int, default=None) -> int:
    value = obj.get(name, default)
    if value is None:
        raise TraceError(f"{where}: field {name!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {name} must be a whole number, got {value!r}")
    if not minimum <= value <= maximum:
        raise TraceError(f"{where}: {name} must be in {minimum}..{maximum}, got {value}")
    return value


def _resources(where: str, obj: dict, *, need_some: bool) -> dict[str, float]:
    out = {n: _number(where, obj, n) for n in RESOURCE_NAMES if n in obj}
    if need_some and not any(v > 0 for v in out.values()):
        raise TraceError(f"{where}: give at least one of {', '.join(RESOURCE_NAMES)} above 0")
    return out


def _cluster(where: str, obj: dict) -> Cluster:
    if obj.get("agora_trace") != FORMAT_VERSION:
        raise TraceError(
            f"{where}: the first line must describe the cluster and start with "
            f'{{"agora_trace": {FORMAT_VERSION}, ...}}; got {str(obj)[:80]}'
        )
    agents = _whole(where, obj, "agents", 1, 10_000_000)
    agent = obj.get("agent")
    if not isinstance(agent, dict):
        raise TraceError(f'{where}: "agent" must be an object such as {{"cpus": 8, "mem": 32768}}')
    resources = _resources(f"{where}: agent", agent, need_some=True)
    roles = obj.get("roles")
    if not isinstance(roles, dict) or not roles:
        raise TraceError(f'{where}: "roles" must map each role to its weight, e.g. {{"batch": 1}}')
    weights = {}
    for role in roles:
        if not isinstance(role, str) or not role or role == "*":
            raise TraceError(f"{where}: role names must be non-empty and not '*', got {role!r}")
        weights[role] = _number(f"{where}: roles", roles, role, minimum=1e-9)
    seconds = _number(where, obj, "seconds", minimum=1e-9)
    return Cluster(agents, resources, weights, seconds)


def _job(where: str, obj: dict, cluster: Cluster) -> Job:
    name = obj.get("job")
    if not isinstance(name, str) or not name or len(name) > 200:
        raise TraceError(f"{where}: job must be a name of 1 to 200 characters, got {name!r}")
    role = obj.get("role")
    if role not in cluster.roles:
        raise TraceError(
            f"{where}: role {role!r} is not one of the cluster's roles "
            f"({', '.join(sorted(cluster.roles))})"
        )
    resources = _resources(where, obj, need_some=True)
    for res, amount in resources.items():
        if amount > cluster.agent.get(res, 0.0):
            raise TraceError(
                f"{where}: a task asks for {res} {amount:g}, more than an agent has "
                f"({cluster.agent.get(res, 0.0):g}); it could never run"
            )
    return Job(
        job=name,
        at=_number(where, obj, "at"),
        role=role,
        tasks=_whole(where, obj, "tasks", 1, MAX_TASKS_PER_JOB),
        resources=resources,
        duration=_number(where, obj, "duration"),
        priority=_whole(where, obj, "priority", -1_000_000, 1_000_000, default=0),
    )


def parse_lines(lines: Iterable[str], source: str = "trace") -> Trace:
    cluster: Cluster | None = None
    jobs: list[Job] = []
    names: set[str] = set()
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: each line must be a JSON object")
        if cluster is None:
            cluster = _cluster(where, obj)
            continue
        job = _job(where, obj, cluster)
        if job.at > cluster.seconds:
            raise TraceError(
                f"{where}: job {job.job!r} arrives at {job.at:g} s, after the trace's end "
                f"({cluster.seconds:g} s); raise seconds in the first line or drop the job"
            )
        if job.job in names:
            raise TraceError(f"{where}: job {job.job!r} appears twice; names must be unique")
        names.add(job.job)
        jobs.append(job)
    if cluster is None:
        raise TraceError(f"{source}: empty; the first line must describe the cluster")
    jobs.sort(key=lambda j: j.at)  # stable: equal times keep the file's order
    return Trace(cluster, jobs)


def read_trace(path: Path) -> Trace:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_lines(f, str(path))
    except OSError as e:
        raise TraceError(f"{path}: {e.strerror}") from None


def _lines(trace: Trace) -> Iterator[str]:
    c = trace.cluster
    yield json.dumps(
        {
            "agora_trace": FORMAT_VERSION,
            "agents": c.agents,
            "agent": c.agent,
            "roles": c.roles,
            "seconds": c.seconds,
        }
    )
    for j in trace.jobs:
        row: dict = {"job": j.job, "at": round(j.at, 6), "role": j.role, "tasks": j.tasks}
        row.update({k: round(v, 6) for k, v in j.resources.items()})
        row["duration"] = round(j.duration, 6)
        if j.priority:
            row["priority"] = j.priority
        yield json.dumps(row)


def write_trace(trace: Trace, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in _lines(trace):
            f.write(line + "\n")
