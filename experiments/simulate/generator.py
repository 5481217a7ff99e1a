"""A trace generator shaped like Google's published cluster traces, from a seed.

What the papers published, and what is taken from each:

- Reiss, Tumanov, Ganger, Katz, Kozuch, "Heterogeneity and dynamicity of clouds at scale:
  Google trace analysis", SoCC 2012 (the 2011 trace: 12,500 machines, 29 days): the workload
  is "driven by many short jobs that demand quick scheduling decisions", while a few long
  jobs hold most of the resources; job sizes and durations are heavy-tailed, from one task to
  thousands and from seconds to the whole trace. Here: most batch jobs are one task, sizes
  follow a power law (P(tasks > x) ~ 1/x) up to a few thousand, durations a log-normal whose
  tail reaches hours.
- Schwarzkopf, Konwinski, Abd-El-Malek, Wilkes, "Omega: flexible, scalable schedulers for
  large compute clusters", EuroSys 2013, section 2.1 and its figure 2: over 80% of jobs are
  batch jobs, but service jobs hold 55-80% of the resources, because they run far longer
  (hours to the whole trace, against minutes). Here: two roles, `batch` and `service`;
  `service_share` (default 0.6) of the offered CPU load is service jobs; service jobs are
  about a tenth of all jobs at the defaults.

- The 2011 trace's totals (about 672,000 jobs and 25 million tasks on 12,500 machines over 29
  days, as Reiss et al. and Di, Kondo and Cirne, "Characterization and comparison of cloud
  versus Grid workloads", CLUSTER 2012, give them): about 1.9 jobs and 69 tasks per machine
  per day. The durations below are set so that, at the default load, a generated trace comes
  near those rates (`rates()` gives a trace's own; the report prints them beside these).

The parameters (the medians, the tail exponents, the task shapes) are chosen to give those
shapes and rates; they are not fitted to the trace files. `load` sets the arrival rates: the
CPU-seconds the jobs ask for over the trace, as a share of the cluster's.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agora.experiments.simulate.trace import Cluster, Job, Trace

__all__ = ["Shape", "generate", "rates"]

BATCH, SERVICE = "batch", "service"
SERVICE_PRIORITY = 100  # Borg's production band sits above batch
DAY = 86400.0
# The 2011 trace's rates per machine per day (see above).
GOOGLE_JOBS_PER_MACHINE_DAY = 672_000 / 12_500 / 29
GOOGLE_TASKS_PER_MACHINE_DAY = 25_000_000 / 12_500 / 29


@dataclass(frozen=True)
class Shape:
    agents: int = 100
    agent_cpus: float = 8.0
    agent_mem: float = 32768.0
    seconds: float = 3600.0
    load: float = 0.7  # CPU-seconds asked for / the cluster's, over the trace
    service_share: float = 0.6  # of that load, service jobs
    duration_scale: float = 1.0  # every duration times this (a short trace of the same shape)
    max_tasks: int = 5000  # the largest batch job
    seed: int = 1

    def __post_init__(self) -> None:
        checks = {
            "agents": self.agents >= 1,
            "agent_cpus": self.agent_cpus >= 1,
            "agent_mem": self.agent_mem >= 1024,
            "seconds": self.seconds > 0,
            "load": 0 < self.load <= 10,
            "service_share": 0 <= self.service_share <= 1,
            "duration_scale": self.duration_scale > 0,
            "max_tasks": self.max_tasks >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"trace shape: {name} = {getattr(self, name)!r} is out of range")


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, rng.lognormvariate(math.log(median), sigma)))


def _power_law(rng: random.Random, low: int, high: int, alpha: float) -> int:
    """P(size > x) = (low / x) ** alpha: most near `low`, a few near `high`."""
    return min(high, int(low / (1.0 - rng.random()) ** (1.0 / alpha)))


class _Draw:
    """One job of a role: its size, task shape and duration (before the time scale)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape

    def batch(self, rng: random.Random) -> tuple[int, float, float, float]:
        s = self.shape
        tasks = 1 if rng.random() < 0.5 else _power_law(rng, 2, s.max_tasks, 0.8)
        cpus = rng.choices((0.25, 0.5, 1.0, 2.0), weights=(40, 30, 20, 10))[0]
        cpus = min(cpus, s.agent_cpus)
        mem = min(s.agent_mem, round(cpus * rng.uniform(1024, 4096)))
        duration = _lognormal(rng, 600.0, 2.0, 1.0, 24 * 3600.0)
        return tasks, cpus, mem, duration

    def service(self, rng: random.Random) -> tuple[int, float, float, float]:
        s = self.shape
        tasks = rng.randint(1, 3) if rng.random() < 0.5 else _power_law(rng, 4, 200, 1.0)
        cpus = min(s.agent_cpus, rng.choices((0.5, 1.0, 2.0, 4.0), weights=(20, 40, 30, 10))[0])
        mem = min(s.agent_mem, round(cpus * rng.uniform(2048, 4096)))
        duration = _lognormal(rng, 4 * 3600.0, 1.0, 600.0, 7 * 24 * 3600.0)
        return tasks, cpus, mem, duration


def _mean_work(draw, shape: Shape, seed: int) -> float:
    """Mean CPU-seconds a job asks for within the trace (its tasks x cpus x the part of its
    duration that fits in the trace, on average half of it at the longest)."""
    rng = random.Random(seed)
    cap = shape.seconds / 2
    total = 0.0
    n = 20_000
    for _ in range(n):
        tasks, cpus, _, duration = draw(rng)
        total += tasks * cpus * min(duration * shape.duration_scale, cap)
    return total / n


def generate(shape: Shape) -> Trace:
    draw = _Draw(shape)
    cluster_cpus = shape.agents * shape.agent_cpus
    roles = {SERVICE: 1.0, BATCH: 1.0}
    jobs: list[Job] = []
    for n, (role, pick, share) in enumerate(
        (
            (SERVICE, draw.service, shape.service_share),
            (BATCH, draw.batch, 1.0 - shape.service_share),
        )
    ):
        if share <= 0:
            continue
        # Arrivals draw from their own generator, shapes from another: the same seed gives
        # the same arrival times whatever the shapes' parameters.
        arrivals = random.Random(shape.seed * 1009 + n)
        rng = random.Random(shape.seed * 7919 + n)
        rate = share * shape.load * cluster_cpus / _mean_work(pick, shape, shape.seed + n)
        t = arrivals.expovariate(rate)
        while t < shape.seconds:
            tasks, cpus, mem, duration = pick(rng)
            jobs.append(
                Job(
                    job=f"{role}-{len(jobs) + 1}",
                    at=round(t, 6),
                    role=role,
                    tasks=tasks,
                    resources={"cpus": cpus, "mem": float(mem)},
                    duration=round(duration * shape.duration_scale, 6),
                    priority=SERVICE_PRIORITY if role == SERVICE else 0,
                )
            )
            t += arrivals.expovariate(rate)
    jobs.sort(key=lambda j: j.at)
    agent = {"cpus": shape.agent_cpus, "mem": shape.agent_mem}
    return Trace(Cluster(shape.agents, agent, roles, shape.seconds), jobs)


def rates(trace: Trace) -> dict[str, float]:
    """Jobs and tasks per agent per day of a trace, to set beside the Google trace's."""
    c = trace.cluster
    scale = DAY / c.seconds / c.agents
    return {
        "jobs_per_agent_day": round(len(trace.jobs) * scale, 2),
        "tasks_per_agent_day": round(trace.tasks * scale, 1),
        "google_jobs_per_machine_day": round(GOOGLE_JOBS_PER_MACHINE_DAY, 2),
        "google_tasks_per_machine_day": round(GOOGLE_TASKS_PER_MACHINE_DAY, 1),
    }
