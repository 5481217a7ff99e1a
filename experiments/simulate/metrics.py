"""What a simulation measures, as pure functions and a recorder fed by the engine.

- utilisation: the share of the cluster's CPUs (and memory) that running tasks hold, integrated
  exactly between events (not sampled);
- job wait: arrival -> the Accept that launched its last task, by size class;
- fairness: each role's dominant share of what its running tasks hold, sampled, against the
  DRF optimum of that moment (`drf_optimum`: weighted progressive filling, each role capped by
  what it wants: what runs plus what waits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SIZE_CLASSES", "Recorder", "drf_optimum", "size_class"]

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


def _dominant(vector: Mapping[str, float], capacity: Mapping[str, float]) -> float:
    return max((vector.get(r, 0.0) / c for r, c in capacity.items() if c > 0), default=0.0)


def drf_optimum(
    weights: Mapping[str, float],
    demands: Mapping[str, Mapping[str, float]],
    capacity: Mapping[str, float],
) -> dict[str, float]:
    """Each role's dominant share under weighted DRF with divisible demands: raise every
    role's dominant share at the rate of its weight, in the proportions of its own demand,
    until the role has all it wants or a resource runs out (progressive filling). Roles that
    want nothing get 0."""
    shares = {role: 0.0 for role in weights}
    wanted = {role: _dominant(demands.get(role, {}), capacity) for role in weights}
    # Per role, how much of each resource one unit of dominant share takes.
    per_share: dict[str, dict[str, float]] = {}
    for role, want in wanted.items():
        if want > 0:
            d = demands[role]
            per_share[role] = {r: d.get(r, 0.0) / want / c for r, c in capacity.items() if c > 0}
    used = {r: 0.0 for r in capacity}
    active = {role for role in per_share}
    while active:
        # The level step every active role can take: until one is sated or a resource is full.
        rate = {r: sum(weights[x] * per_share[x].get(r, 0.0) for x in active) for r in capacity}
        steps = [(wanted[x] - shares[x]) / weights[x] for x in active]
        steps += [(1.0 - used[r]) / rate[r] for r in capacity if rate[r] > 1e-15]
        step = max(0.0, min(steps))
        for x in active:
            shares[x] += step * weights[x]
        for r in capacity:
            used[r] += step * rate[r]
        full = {r for r in capacity if used[r] >= 1.0 - 1e-9 and rate[r] > 1e-15}
        done = {x for x in active if shares[x] >= wanted[x] - 1e-12}
        done |= {x for x in active if any(per_share[x].get(r, 0.0) > 1e-15 for r in full)}
        if not done:
            break  # nothing limits anyone (all demands zero): cannot happen with step > 0
        active -= done
    return shares


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

    def __post_init__(self) -> None:
        self.running = {role: {r: 0.0 for r in self.capacity} for role in self.roles}
        self.busy_area = {r: 0.0 for r in self.capacity}
        self.decide_seconds = {role: 0.0 for role in self.roles}

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

    def arrived(self, job: str, role: str, tasks: int, now: float) -> None:
        self.jobs[job] = JobRecord(role, tasks, now)

    def launched(self, job: str, now: float) -> None:
        self.jobs[job].launched = now

    def sample(self, now: float, demands: Mapping[str, Mapping[str, float]], weights) -> None:
        self.advance(now)
        shares = {role: _dominant(self.running[role], self.capacity) for role in self.roles}
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
