"""Persistence of jobs and the framework id: one SQLite file in the daemon's state dir.

A job is stored as its header (the `Job` message without instances) plus one row per instance,
so a task update rewrites one small row, not the whole job: a 10,000-instance job costs the same
per update as a single one. Every change is written before it is acknowledged, so a restarted
daemon resumes exactly where it stopped. `JobStore(None)` keeps everything in memory.
"""

from __future__ import annotations

from collections.abc import Iterable

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
"""


class JobStore(StateStore):
    SCHEMA = _SCHEMA

    def put_job(self, job: batch_pb2.Job, instances: Iterable[int] | None = None) -> None:
        """Writes the job's header and the given instances (None: all of them) atomically."""
        header = batch_pb2.Job()
        header.CopyFrom(job)
        del header.instances[:]
        indices = range(len(job.instances)) if instances is None else sorted(set(instances))
        rows = [(job.job_id, i, job.instances[i].SerializeToString()) for i in indices]
        self._db.execute("BEGIN")
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO jobs (job_id, sequence, state, data) VALUES (?, ?, ?, ?)",
                (job.job_id, job.sequence, job.state, header.SerializeToString()),
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO instances (job_id, idx, data) VALUES (?, ?, ?)", rows
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def delete_jobs(self, job_ids: list[str]) -> None:
        self._db.execute("BEGIN")
        try:
            for job_id in job_ids:
                self._db.execute("DELETE FROM instances WHERE job_id = ?", (job_id,))
                self._db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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
