"""Job dependencies (`agora job submit --after JOB[:ok|any|notok]`, Slurm's --dependency):
what a job's `after` list asks, whether an ended job met it, and the words for people. Pure.

A job with dependencies is JOB_WAITING until each has ended as asked; the first that ends
otherwise cancels it (KILLED, saying which and how), and that cancellation may cancel the jobs
that waited for it in turn. Dependencies name jobs that exist when the job is submitted, so a
cycle cannot be made one job at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from agora.common.request_limits import MAX_NAME_LENGTH, LimitError, check_text
from agora.v1 import batch_pb2

__all__ = [
    "CONDITIONS",
    "DependencyError",
    "DependencyUnmet",
    "UnknownDependency",
    "condition_of",
    "latest_by_name",
    "submission_order",
    "met",
    "parse_after",
    "resolve",
    "waiting_message",
    "wanted",
]

MAX_DEPENDENCIES = 100  # jobs one job may wait for

# What `--after JOB:WORD` says -> the condition.
CONDITIONS = {
    "ok": batch_pb2.AFTER_OK,
    "any": batch_pb2.AFTER_ANY,
    "notok": batch_pb2.AFTER_NOT_OK,
}
_ENDED_OK = {batch_pb2.JOB_SUCCEEDED}
_ENDED_NOT_OK = {batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED}


class DependencyError(ValueError):
    """A dependency that cannot be (the message says which and why)."""


class UnknownDependency(DependencyError):
    """No job has that id or name."""


class DependencyUnmet(DependencyError):
    """The job already ended otherwise than asked."""


def parse_after(text: str) -> batch_pb2.Dependency:
    """`JOB` or `JOB:ok|any|notok` -> a Dependency; ValueError saying what to write."""
    job, _, word = text.rpartition(":") if ":" in text else (text, "", "ok")
    if not job or word not in CONDITIONS:
        raise ValueError(
            f"--after {text!r}: give JOB or JOB:ok, JOB:any or JOB:notok (a job id or name)"
        )
    return batch_pb2.Dependency(job=job, condition=CONDITIONS[word])


def met(condition: int, state: int) -> bool | None:
    """Whether a job that is in `state` meets `condition`: None while it has not ended."""
    if state not in _ENDED_OK and state not in _ENDED_NOT_OK:
        return None
    if condition == batch_pb2.AFTER_ANY:
        return True
    if condition == batch_pb2.AFTER_NOT_OK:
        return state in _ENDED_NOT_OK
    return state in _ENDED_OK


def wanted(condition: int) -> str:
    """How a dependency must end, for people: "succeed", "end", "fail"."""
    words: dict[int, str] = {batch_pb2.AFTER_ANY: "end", batch_pb2.AFTER_NOT_OK: "fail"}
    return words.get(condition, "succeed")


def latest_by_name(jobs: Mapping[str, batch_pb2.Job]) -> dict[str, batch_pb2.Job]:
    """Each job name -> its latest job (highest sequence): what `--after NAME` means."""
    latest: dict[str, batch_pb2.Job] = {}
    for job in jobs.values():
        name = job.spec.name
        if name not in latest or job.sequence > latest[name].sequence:
            latest[name] = job
    return latest


def resolve(
    after,
    jobs: Mapping[str, batch_pb2.Job],
    latest: Mapping[str, batch_pb2.Job] | None = None,
) -> tuple[list[batch_pb2.Dependency], list[tuple[str, int]]]:
    """`after` with names resolved to their latest job's id, and the (job id, condition) of
    those that have not ended yet. UnknownDependency when a job is unknown, DependencyUnmet
    when one already ended otherwise (the job could never run: refused, not cancelled).
    `latest` is latest_by_name(jobs), given by a caller resolving many jobs (a graph) so it
    is built once rather than once a job."""
    if len(after) > MAX_DEPENDENCIES:
        raise DependencyError(
            f"{len(after)} dependencies; a job may wait for at most {MAX_DEPENDENCIES}"
        )
    for dependency in after:
        try:
            check_text("after", dependency.job, MAX_NAME_LENGTH)  # a job's name or id
        except LimitError as e:
            raise DependencyError(str(e)) from None
    if latest is None:
        latest = latest_by_name(jobs)
    canonical: list[batch_pb2.Dependency] = []
    pending: list[tuple[str, int]] = []
    for dependency in after:
        if not dependency.job:
            raise UnknownDependency("--after: name a job (its id or its name)")
        found = jobs.get(dependency.job) or latest.get(dependency.job)
        if found is None:
            raise UnknownDependency(f"--after {dependency.job}: no job has that id or name")
        job = found
        verdict = met(dependency.condition, job.state)
        if verdict is False:
            ended = batch_pb2.JobState.Name(job.state).removeprefix("JOB_")
            raise DependencyUnmet(
                f"--after {dependency.job}: job {job.job_id} already ended {ended}; this job "
                f"waits for it to {wanted(dependency.condition)}, so it could never run"
            )
        canonical.append(batch_pb2.Dependency(job=job.job_id, condition=dependency.condition))
        if verdict is None and all(job.job_id != j for j, _ in pending):
            pending.append((job.job_id, dependency.condition))
    return canonical, pending


def waiting_message(job: batch_pb2.Job) -> str:
    """Why a JOB_WAITING job waits, naming each job it still waits for and how."""
    asked = {d.job: d.condition for d in job.spec.after}
    parts = [f"{j} to {wanted(asked.get(j, batch_pb2.AFTER_OK))}" for j in job.waiting_for]
    return "waiting for " + ", ".join(parts)


def condition_of(job: batch_pb2.Job, dependency_id: str) -> int:
    return next((d.condition for d in job.spec.after if d.job == dependency_id), batch_pb2.AFTER_OK)


def submission_order(after_by_name: Mapping[str, list[str]]) -> list[str]:
    """The names of a job graph (name -> the names it waits for, within the graph) in an
    order where each comes after those it waits for; ValueError naming a cycle. Pure.

    Kahn's algorithm, without recursion: a chain of MAX_GRAPH_JOBS jobs is deeper than
    Python's stack, and the caller would have heard UNKNOWN instead of why.
    """
    # Each dependency once, in the order the job names them (a job may name one twice).
    waits_for = {
        name: list(dict.fromkeys(d for d in dependencies if d in after_by_name))
        for name, dependencies in after_by_name.items()
    }
    unmet = {name: len(dependencies) for name, dependencies in waits_for.items()}
    waited_by: dict[str, list[str]] = {name: [] for name in waits_for}
    for name, dependencies in waits_for.items():
        for dependency in dependencies:
            waited_by[dependency].append(name)
    ready = deque(name for name, count in unmet.items() if count == 0)
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for dependent in waited_by[name]:
            unmet[dependent] -= 1
            if unmet[dependent] == 0:
                ready.append(dependent)
    if len(order) < len(waits_for):
        raise ValueError(f"the jobs wait for each other in a cycle: {_a_cycle(waits_for, order)}")
    return order


def _a_cycle(waits_for: Mapping[str, list[str]], ordered: list[str]) -> str:
    """One cycle among the jobs Kahn's algorithm could not order, as "a -> b -> a". Each of
    them waits for another of them (else it would have been ordered), so a walk along the
    first unordered dependency of each always closes a loop."""
    done = set(ordered)
    name = next(n for n in waits_for if n not in done)
    path: list[str] = []
    seen: dict[str, int] = {}
    while name not in seen:
        seen[name] = len(path)
        path.append(name)
        name = next(d for d in waits_for[name] if d not in done)
    return " -> ".join([*path[seen[name] :], name])
