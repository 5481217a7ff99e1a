"""Persistence of jobs and the framework id: one SQLite file in the daemon's state dir.

Each job is stored whole (its serialized `Job` message) after every change, so a restarted
daemon resumes exactly where it stopped. `JobStore(None)` keeps everything in memory.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agora.v1 import batch_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    state INTEGER NOT NULL,
    data BLOB NOT NULL
);
"""


class JobStore:
    def __init__(self, path: Path | str | None) -> None:
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(str(path) if path is not None else ":memory:",
                                   isolation_level=None)
        # WAL + NORMAL: a committed job survives a daemon crash; only an OS crash may lose the
        # last moments, which the master's reconciliation then repairs.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def framework_id(self) -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key='framework_id'").fetchone()
        return row[0] if row else ""

    def set_framework_id(self, framework_id: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('framework_id', ?)",
                         (framework_id,))

    def put_job(self, job: batch_pb2.Job) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO jobs (job_id, sequence, state, data) VALUES (?, ?, ?, ?)",
            (job.job_id, job.sequence, job.state, job.SerializeToString()))

    def load_jobs(self) -> list[batch_pb2.Job]:
        jobs = []
        for (data,) in self._db.execute("SELECT data FROM jobs ORDER BY sequence"):
            job = batch_pb2.Job()
            job.ParseFromString(data)
            jobs.append(job)
        return jobs
