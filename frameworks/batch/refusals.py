"""How long the batch framework refuses the offers it does not use, by default, and why; and
which jobs a launch the master refused is the fault of.

Declared once for the scheduler, the daemon's config and `agora batch` (--decline-refuse,
--idle-refuse). Only the standard library: `agora batch --help` reads them without loading the
framework.

A refusal is a decline filter at the master, as in Mesos: it hides from us only an offer of
that agent contained in what was refused (an offer with more of any resource is made at once),
so the resources our own finished tasks free come back at once; and new work (a submission, a
retry due) revives, which clears every filter. A refusal therefore only spares the master and
us the same unusable offer again and again.
"""

from __future__ import annotations

from collections.abc import Mapping

# While work waits: offers it cannot use, and what a launch leaves of an offer where it placed
# all it could (Mesos' default refusal).
DECLINE_REFUSE_SECONDS = 5.0
# While work waits, offers too small for every instance waiting (less of some resource than
# each asks for): nothing but a revive (new work, a retry due) or more free room there, which
# the master offers at once, can make them of use, so they are refused for longer, as
# Marathon refuses what it cannot use for 120 s. On a busy cluster the scraps of every agent
# would otherwise come back every DECLINE_REFUSE_SECONDS, hundreds a second at 10,000 agents.
UNFIT_REFUSE_SECONDS = 60.0
# While nothing waits. The framework suppresses its offers then too, so this only bounds what
# a revive lost on the way costs: seconds, not minutes.
IDLE_REFUSE_SECONDS = 15.0


# The master's refusals of an Accept that are the tasks' own doing (a field past its limits, a
# kill grace past its maximum, a user or role its ACLs refuse), as agora.common.errors.Reason
# names them: launching again changes nothing. Others (an offer gone or taken) are routine.
_THE_TASKS_FAULT = frozenset({"INVALID_REQUEST", "PERMISSION_DENIED"})


def blamed_jobs(
    reason: str | None, metadata: Mapping[str, str], jobs_by_task: Mapping[str, str]
) -> set[str]:
    """The ids of the jobs a refused launch (of the tasks `jobs_by_task` maps to their jobs)
    is the fault of, read from the refusal's ErrorInfo, never its wording: the job of the task
    its metadata names ("task_id"); every job for a refusal of the user the tasks run as
    ("user": every batch task runs as the framework's); else the launch's job if it is the
    only one. None for a routine refusal: a refusal that blames no job leaves its instances
    waiting (the job says why)."""
    if reason not in _THE_TASKS_FAULT:
        return set()
    jobs = set(jobs_by_task.values())
    named = jobs_by_task.get(metadata.get("task_id", ""))
    if named is not None:
        return {named}
    if "user" in metadata or len(jobs) == 1:
        return jobs
    return set()
