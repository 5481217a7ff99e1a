"""Job dependencies (`agora job submit --after JOB[:ok|any|notok]`, Slurm's --dependency):
what a job's `after` list asks, whether an ended job met it, and the words for people. Pure.

A job with dependencies is JOB_WAITING until each has ended as asked; the first that ends
otherwise cancels it (KILLED, saying which and how), and that cancellation may cancel the jobs
that waited for it in turn. Dependencies name jobs that exist when the job is submitted, so a
cycle cannot be made one job at a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from agora.v1 import batch_pb2

__all__ = [
    "CONDITIONS",
    "DependencyError",
    "DependencyUnmet",
    "UnknownDependency",
    "condition_of",
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


def resolve(
    after, jobs: Mapping[str, batch_pb2.Job]
) -> tuple[list[batch_pb2.Dependency], list[tuple[str, int]]]:
    """`after` with names resolved to their latest job's id, and the (job id, condition) of
    those that have not ended yet. UnknownDependency when a job is unknown, DependencyUnmet
    when one already ended otherwise (the job could never run: refused, not cancelled)."""
    latest: dict[str, batch_pb2.Job] = {}
    for job in jobs.values():
        name = job.spec.name
        if name not in latest or job.sequence > latest[name].sequence:
            latest[name] = job
    if len(after) > MAX_DEPENDENCIES:
        raise DependencyError(
            f"{len(after)} dependencies; a job may wait for at most {MAX_DEPENDENCIES}"
        )
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
    order where each comes after those it waits for; ValueError naming a cycle. Pure."""
    order: list[str] = []
    state: dict[str, str] = {}  # name -> "visiting" | "done"

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = path[path.index(name) :] + [name]
            raise ValueError(f"the jobs wait for each other in a cycle: {' -> '.join(cycle)}")
        state[name] = "visiting"
        for dependency in after_by_name.get(name, []):
            if dependency in after_by_name:
                visit(dependency, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in after_by_name:
        visit(name, [])
    return order
