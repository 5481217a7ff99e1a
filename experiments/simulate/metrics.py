"""What a simulation measures, as pure functions and a recorder fed by the engine.

- utilisation: the share of the cluster's CPUs (and memory) that running tasks hold, integrated
  exactly between events (not sampled);
- job wait: arrival -> the Accept that launched its last task, by size class;
- fairness: each role's dominant share of what its running tasks hold, sampled, against the
  DRF optimum of that moment (experiments/drf.py's `drf_optimum`: weighted progressive
  filling, each role capped by what it wants: what runs plus what waits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agora.experiments.drf import dominant_share, drf_optimum

__all__ = ["SIZE_CLASSES", "Recorder", "size_class"]

# Job sizes in tasks, as the Google trace papers group them: one task, a handful, tens,
# hundreds, and the few huge jobs.
SIZE_CLASSES = (("1", 1, 1), ("2-10", 2, 10), ("11-100", 11, 100), ("101-1000", 101, 1000))
HUGE = ">1000"


def size_class(tasks: int) -> str:
    for name, low, high in SIZE_CLASSES:
        if low <= tasks <= high:
            return name
    return HUGE


def class_names() -> list[str]:
    return [name for name, _, _ in SIZE_CLASSES] + [HUGE]


@dataclass
class JobRecord:
    role: str
    tasks: int
    arrived: float
    launched: float | None = None  # when its last task was launched


@dataclass
class Recorder:
    """Fed by the engine; turned into figures by the report."""

    capacity: dict[str, float]
    roles: list[str]
    running: dict[str, dict[str, float]] = field(default_factory=dict)  # role -> resource
    busy_area: dict[str, float] = field(default_factory=dict)  # resource -> amount x seconds
    last: float = 0.0
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    offers: int = 0
    cycles: int = 0
    conflicts: int = 0  # optimistic Accepts that found their room taken
    priority_refusals: int = 0  # optimistic Accepts refused for a rival below its share
    launches: int = 0
    tasks_launched: int = 0
    allocate_cpu_seconds: float = 0.0
    decide_seconds: dict[str, float] = field(default_factory=dict)  # role -> virtual busy
    preemptions: int = 0  # tasks stopped for another role
    preempted: dict[str, int] = field(default_factory=dict)  # role -> its tasks stopped
    preempted_for: dict[str, int] = field(default_factory=dict)  # role -> stopped for it

    def __post_init__(self) -> None:
        self.running = {role: {r: 0.0 for r in self.capacity} for role in self.roles}
        self.busy_area = {r: 0.0 for r in self.capacity}
        self.decide_seconds = {role: 0.0 for role in self.roles}
        self.preempted = {role: 0 for role in self.roles}
        self.preempted_for = {role: 0 for role in self.roles}

    def advance(self, now: float) -> None:
        dt = now - self.last
        if dt > 0:
            for role_use in self.running.values():
                for r, amount in role_use.items():
                    self.busy_area[r] += amount * dt
            self.last = now

    def started(self, now: float, role: str, use: Mapping[str, float], count: int) -> None:
        self.advance(now)
        held = self.running[role]
        for r, amount in use.items():
            if r in held:
                held[r] += amount * count
        self.tasks_launched += count

    def ended(self, now: float, role: str, use: Mapping[str, float], count: int) -> None:
        self.advance(now)
        held = self.running[role]
        for r, amount in use.items():
            if r in held:
                held[r] = max(0.0, held[r] - amount * count)

    def stopped(
        self, now: float, role: str, beneficiary: str, use: Mapping[str, float], count: int
    ) -> None:
        """`count` tasks of `role` preempted for `beneficiary`: they end now."""
        self.ended(now, role, use, count)
        self.preemptions += count
        self.preempted[role] = self.preempted.get(role, 0) + count
        self.preempted_for[beneficiary] = self.preempted_for.get(beneficiary, 0) + count

    def arrived(self, job: str, role: str, tasks: int, now: float) -> None:
        self.jobs[job] = JobRecord(role, tasks, now)

    def launched(self, job: str, now: float) -> None:
        self.jobs[job].launched = now

    def sample(self, now: float, demands: Mapping[str, Mapping[str, float]], weights) -> None:
        self.advance(now)
        shares = {role: dominant_share(self.running[role], self.capacity) for role in self.roles}
        optimum = drf_optimum(weights, demands, self.capacity)
        cpus = self.capacity.get("cpus", 0.0)
        used = sum(u.get("cpus", 0.0) for u in self.running.values())
        row = {"t": round(now, 3), "cpu_utilisation": used / cpus if cpus else 0.0}
        for role in self.roles:
            row[f"share_{role}"] = shares[role]
            row[f"optimum_{role}"] = optimum[role]
        self.samples.append(row)

    def utilisation(self, seconds: float) -> dict[str, float]:
        self.advance(seconds)
        return {
            r: self.busy_area[r] / (c * seconds)
            for r, c in self.capacity.items()
            if c > 0 and seconds > 0
        }
