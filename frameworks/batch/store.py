"""Persistence of jobs and the framework id: one SQLite file in the daemon's state dir.

A job is stored as its header (the `Job` message without instances) plus one row per instance,
so a task update rewrites one small row, not the whole job: a 10,000-instance job costs the same
per update as a single one. `JobStore(None)` keeps everything in memory.

Writes are grouped: `put_job` notes what changed, and `commit` writes everything noted so far
in one transaction (the jobs as they are then: an instance changed three times in one batch of
updates is written once). The scheduler commits before anything leaves the daemon that depends
on a change: before the driver acknowledges the updates handled so far (so every update is
written before it is acknowledged, and a restarted daemon resumes where it stopped), before a
launch goes to the master, before the Batch API answers or shows a job, and at the end of
every turn of the event loop whatever else was noted (grouping the updates of one batch of
events: a timer instead made more commits, as the first of each burst's acknowledgements goes
out at once). A commit that fails keeps everything noted for the next
one, and nothing is acknowledged until one succeeds: the agents resend those updates.
"""

from __future__ import annotations

from collections.abc import Iterable

from agora.frameworks.batch.state import without_instances
from agora.frameworks.sdk import StateStore
from agora.v1 import batch_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    state INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS owner_weights (
    owner TEXT PRIMARY KEY,
    weight REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS schedules (
    name TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
"""


class JobStore(StateStore):
    SCHEMA = _SCHEMA

    def __init__(self, path) -> None:
        super().__init__(path)
        # job id -> (the job, the indices of its changed instances; None: all of them), noted
        # by put_job and written by the next commit.
        self._changed: dict[str, tuple[batch_pb2.Job, set[int] | None]] = {}
        # schedule name -> the schedule as it is to be written (None: deleted). In the same
        # commit as the jobs: a run's job and the schedule's record of it land together, so a
        # crash can neither run a fire time twice nor lose the job it started.
        self._schedules: dict[str, batch_pb2.Schedule | None] = {}

    @property
    def uncommitted(self) -> bool:
        """Whether changes are noted that no commit has written yet."""
        return bool(self._changed or self._schedules)

    def put_schedule(self, schedule: batch_pb2.Schedule) -> None:
        """Notes the schedule for the next commit (written as it is then)."""
        self._schedules[schedule.spec.name] = schedule

    def delete_schedule(self, name: str) -> None:
        """Notes the schedule's deletion for the next commit."""
        self._schedules[name] = None

    def discard_schedule(self, name: str) -> None:
        """Forgets what was noted of the schedule (a change that could not be stored)."""
        self._schedules.pop(name, None)

    def owner_weights(self) -> dict[str, float]:
        return dict(self._db.execute("SELECT owner, weight FROM owner_weights"))

    def set_owner_weight(self, owner: str, weight: float) -> None:
        """Written at once (its own transaction); a weight of 1 is the default: forgotten."""
        if weight == 1.0:
            self._db.execute("DELETE FROM owner_weights WHERE owner = ?", (owner,))
        else:
            self._db.execute(
                "INSERT OR REPLACE INTO owner_weights (owner, weight) VALUES (?, ?)",
                (owner, weight),
            )

    def load_schedules(self) -> list[batch_pb2.Schedule]:
        out = []
        for (data,) in self._db.execute("SELECT data FROM schedules ORDER BY name"):
            schedule = batch_pb2.Schedule()
            schedule.ParseFromString(data)
            out.append(schedule)
        return out

    def put_job(self, job: batch_pb2.Job, instances: Iterable[int] | None = None) -> None:
        """Notes the job's header and the given instances (None: all of them) as changed; the
        next `commit` writes them as they are then, together."""
        noted = self._changed.get(job.job_id)
        if noted is None or noted[0] is not job:
            self._changed[job.job_id] = (job, None if instances is None else set(instances))
        elif noted[1] is not None:
            if instances is None:
                self._changed[job.job_id] = (job, None)
            else:
                noted[1].update(instances)

    def commit(self) -> int:
        """Writes every noted change in one transaction; returns how many jobs it wrote. If it
        fails, the changes stay noted (the next commit writes them) and it raises."""
        if not self._changed and not self._schedules:
            return 0
        jobs: list[tuple[str, int, int, bytes]] = []
        rows: list[tuple[str, int, bytes]] = []
        shrunk: list[tuple[str, int]] = []  # (job id, instances): rows past them are gone
        for job, indices in self._changed.values():
            header = without_instances(job).SerializeToString()
            jobs.append((job.job_id, job.sequence, job.state, header))
            which = range(len(job.instances)) if indices is None else sorted(indices)
            rows.extend((job.job_id, i, job.instances[i].SerializeToString()) for i in which)
            if indices is None:
                shrunk.append((job.job_id, len(job.instances)))
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT OR REPLACE INTO jobs (job_id, sequence, state, data) VALUES (?, ?, ?, ?)",
                jobs,
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO instances (job_id, idx, data) VALUES (?, ?, ?)", rows
            )
            self._db.executemany("DELETE FROM instances WHERE job_id = ? AND idx >= ?", shrunk)
            for name, schedule in self._schedules.items():
                if schedule is None:
                    self._db.execute("DELETE FROM schedules WHERE name = ?", (name,))
                else:
                    self._db.execute(
                        "INSERT OR REPLACE INTO schedules (name, data) VALUES (?, ?)",
                        (name, schedule.SerializeToString()),
                    )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._changed.clear()
        self._schedules.clear()
        return len(jobs)

    def discard(self, job_id: str) -> None:
        """Forgets what was noted of the job (a submission that could not be stored)."""
        self._changed.pop(job_id, None)

    def delete_jobs(self, job_ids: list[str]) -> None:
        """Deletes the jobs at once (with what was noted of them). If it fails, the jobs and
        what was noted of them stay, and it raises."""
        self._db.execute("BEGIN")
        try:
            for job_id in job_ids:
                self._db.execute("DELETE FROM instances WHERE job_id = ?", (job_id,))
                self._db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        for job_id in job_ids:
            self._changed.pop(job_id, None)

    def close(self) -> None:
        """Writes what is noted, then closes."""
        try:
            self.commit()
        finally:
            super().close()

    def load_jobs(self) -> list[batch_pb2.Job]:
        jobs: dict[str, batch_pb2.Job] = {}
        for (data,) in self._db.execute("SELECT data FROM jobs ORDER BY sequence"):
            job = batch_pb2.Job()
            job.ParseFromString(data)
            jobs[job.job_id] = job
        rows = self._db.execute("SELECT job_id, data FROM instances ORDER BY job_id, idx")
        for job_id, data in rows:
            parent = jobs.get(job_id)
            if parent is not None:
                parent.instances.add().ParseFromString(data)
        return list(jobs.values())
