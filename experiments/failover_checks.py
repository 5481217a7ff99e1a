"""The failover experiment's checks: pure functions over what a run measured (FailoverRun).

The run (failover.py) records wall-clock times per fault and the framework's view of its
tasks; these functions turn them into per-fault samples, figures and pass/fail checks, and
failover_report.py writes them. Nothing here starts a process or reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agora.experiments.checks import Check
from agora.experiments.results import summarize
from agora.v1 import common_pb2

__all__ = [
    "ENDED_BADLY",
    "METRICS",
    "TERMINAL",
    "FailoverRun",
    "FaultTimes",
    "Verdict",
    "checks",
    "judge",
    "lost_tasks",
    "metrics",
    "runs_twice",
    "samples",
]

ENDED_BADLY = {
    common_pb2.TASK_LOST,
    common_pb2.TASK_GONE,
    common_pb2.TASK_UNREACHABLE,
    common_pb2.TASK_DROPPED,
}
TERMINAL = {
    common_pb2.TASK_FINISHED,
    common_pb2.TASK_FAILED,
    common_pb2.TASK_KILLED,
    common_pb2.TASK_ERROR,
    *ENDED_BADLY,
}
METRICS = (
    "elected",
    "agents_back",
    "framework_back",
    "first_offer",
    "back",
    "back_after_listening",
)


@dataclass(frozen=True)
class FaultTimes:
    """One fault and what followed it, as wall-clock times (time.time())."""

    at: float  # the SIGKILL or SIGSTOP
    elected: float  # another master elected (one master: listening again)
    listening: float  # the killed master listening again (pause: the successor elected)
    agents_back: float  # every agent registered with the new leader
    framework_back: float  # the framework subscribed again
    first_offer: float  # the first offer on that subscription
    resumed_to_refusing: float | None = None  # pause: seconds from SIGCONT to NOT_LEADER


@dataclass
class FailoverRun:
    """What a failover run measured, before any judgement."""

    masters: int
    fault: str  # "kill" or "pause"
    faults: list[FaultTimes] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)  # task id -> last state heard
    markers: list[str] = field(default_factory=list)  # marker files: "<task id>.<pid>"
    relaunched: int = 0  # launches a dying master dropped (TASK_UNKNOWN), launched again
    from_deposed: int = 0  # pause: events and answers from a master already succeeded
    framework_ids: list[str] = field(default_factory=list)  # each subscription's id

    @property
    def single(self) -> bool:
        return self.masters == 1


@dataclass
class Verdict:
    """The figures and checks of one run, as the report writes them."""

    samples: list[dict]
    metrics: tuple[str, ...]
    stats: dict[str, dict]
    lost: list[str]
    ran_twice: list[str]
    kept_its_id: bool
    checks: list[Check]


def samples(run: FailoverRun) -> list[dict]:
    """One row per fault: seconds from the fault to each milestone. 'back after listening'
    means something only when the killed master is the one to return (one master)."""
    rows = []
    for kill, t in enumerate(run.faults, start=1):
        back = max(t.agents_back, t.framework_back)
        row = {
            "kill": kill,
            "elected": t.elected - t.at,
            "agents_back": t.agents_back - t.at,
            "framework_back": t.framework_back - t.at,
            "first_offer": t.first_offer - t.at,
            "back": back - t.at,
        }
        if run.single:
            row["back_after_listening"] = back - t.listening
        if t.resumed_to_refusing is not None:
            row["resumed_to_refusing"] = t.resumed_to_refusing
        rows.append(row)
    return rows


def metrics(run: FailoverRun) -> tuple[str, ...]:
    """The figures this run's summary reports."""
    if run.fault == "pause":
        return (*METRICS[:5], "resumed_to_refusing")
    return METRICS if run.single else METRICS[:5]


def runs_twice(markers: list[str]) -> list[str]:
    """Tasks with more than one marker: started by two processes."""
    runs: dict[str, int] = {}
    for name in markers:
        task_id = name.rsplit(".", 1)[0]
        runs[task_id] = runs.get(task_id, 0) + 1
    return sorted(t for t, n in runs.items() if n > 1)


def lost_tasks(states: dict[str, int]) -> list[str]:
    """Tasks that ended LOST/GONE/UNREACHABLE or were never heard of again. DROPPED is the
    framework's own mark: a launch the new leader never knew of (TASK_UNKNOWN on
    reconciliation), relaunched, so not lost."""
    return sorted(
        t
        for t, s in states.items()
        if (s in ENDED_BADLY and s != common_pb2.TASK_DROPPED) or s not in TERMINAL
    )


def checks(
    run: FailoverRun, stats: dict[str, dict], lost: list[str], ran_twice: list[str]
) -> list[Check]:
    """The targets, in the order results.json lists them."""
    out = []
    if run.single:
        out.append(
            Check(
                "listening again -> all back (max)",
                stats["back_after_listening"]["max"],
                1.0,
                "s",
                measured_in="back_after_listening",
            )
        )
    else:
        back = stats["back"]
        out.append(Check("kill -> all back p50", back["p50"], 2.0, "s", measured_in="back"))
        out.append(Check("kill -> all back p99", back["p99"], 4.0, "s", measured_in="back"))
    if run.fault == "pause":
        out.append(
            Check(
                "events from a deposed leader",
                float(run.from_deposed),
                0,
                "events",
                measured_in="events_from_a_deposed_leader",
            )
        )
    out.append(Check("tasks lost", float(len(lost)), 0, "tasks"))
    out.append(Check("tasks run twice", float(len(ran_twice)), 0, "tasks"))
    return out


def judge(run: FailoverRun) -> Verdict:
    rows = samples(run)
    names = metrics(run)
    stats = {m: summarize(s[m] for s in rows) for m in names}
    lost = lost_tasks(run.states)
    ran_twice = runs_twice(run.markers)
    ids = run.framework_ids
    return Verdict(
        samples=rows,
        metrics=names,
        stats=stats,
        lost=lost,
        ran_twice=ran_twice,
        kept_its_id=all(i == ids[0] for i in ids),
        checks=checks(run, stats, lost, ran_twice),
    )
