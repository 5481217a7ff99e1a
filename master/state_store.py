"""The master's durable registry in SQLite (a RegistryStore): agents, frameworks, removals,
weights, quota, drained agents and recent preemptions.

Tasks are not stored: agents report what they run when they re-register, as in Mesos. What is
stored tells a restarted master whom to expect (agents and frameworks keep their ids) and whom to
refuse (removed agents, torn-down frameworks).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from agora.master.registry_store import StoredAgent, StoredFramework
from agora.v1 import common_pb2, operator_pb2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
    agent_id TEXT PRIMARY KEY, info BLOB NOT NULL, registered_at REAL NOT NULL,
    principal TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS frameworks (
    framework_id TEXT PRIMARY KEY, info BLOB NOT NULL, registered_at REAL NOT NULL,
    principal TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS removed (
    kind TEXT NOT NULL, id TEXT NOT NULL, removed_at REAL NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY (kind, id));
CREATE TABLE IF NOT EXISTS weights (role TEXT PRIMARY KEY, weight REAL NOT NULL);
CREATE TABLE IF NOT EXISTS quotas (role TEXT PRIMARY KEY, quota BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS drained (
    agent_id TEXT PRIMARY KEY, deadline REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS join_tokens_spent (token_id TEXT PRIMARY KEY, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS preemptions (
    framework_id TEXT NOT NULL, task_id TEXT NOT NULL, at REAL NOT NULL, data BLOB NOT NULL,
    PRIMARY KEY (framework_id, task_id));
"""


class StateStore:
    """The SQLite RegistryStore: at `path`, or in memory when path is None (nothing survives)."""

    def __init__(self, path: Path | None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self._db = sqlite3.connect(":memory:" if path is None else str(path))
        except sqlite3.Error as e:
            raise OSError(f"cannot open the state store {path}: {e}") from None
        try:
            # WAL + NORMAL: a crash may lose the last write but never corrupts the file, and
            # the master's writes (registrations) stay cheap.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            _add_columns(self._db)
            self._db.commit()
        except sqlite3.Error as e:
            self._db.close()
            # An OSError, which the commands report in one line: not a database, or not ours.
            raise OSError(f"cannot use the state store {path}: {e}") from None

    def describe(self) -> str:
        return str(self.path) if self.path is not None else "memory"

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, params: tuple) -> None:
        self._db.execute(sql, params)
        self._db.commit()

    # agents -------------------------------------------------------------------------------

    def put_agent(
        self, info: common_pb2.AgentInfo, registered_at: float, principal: str = ""
    ) -> None:
        self._write(
            "INSERT OR REPLACE INTO agents VALUES (?, ?, ?, ?)",
            (info.agent_id, info.SerializeToString(), registered_at, principal),
        )

    def agents(self) -> list[StoredAgent]:
        rows = self._db.execute(
            "SELECT info, registered_at, principal FROM agents ORDER BY agent_id"
        )
        return [
            StoredAgent(common_pb2.AgentInfo.FromString(blob), at, principal)
            for blob, at, principal in rows
        ]

    def remove_agent(self, agent_id: str, reason: str) -> None:
        self._db.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,))
        self._db.execute("DELETE FROM drained WHERE agent_id = ?", (agent_id,))
        self._write(
            "INSERT OR REPLACE INTO removed VALUES ('agent', ?, ?, ?)",
            (agent_id, time.time(), reason),  # real time: opened before the core, no clock
        )

    # frameworks ---------------------------------------------------------------------------

    def put_framework(
        self, info: common_pb2.FrameworkInfo, registered_at: float, principal: str = ""
    ) -> None:
        self._write(
            "INSERT OR REPLACE INTO frameworks VALUES (?, ?, ?, ?)",
            (info.framework_id, info.SerializeToString(), registered_at, principal),
        )

    def frameworks(self) -> list[StoredFramework]:
        rows = self._db.execute(
            "SELECT info, registered_at, principal FROM frameworks ORDER BY framework_id"
        )
        return [
            StoredFramework(common_pb2.FrameworkInfo.FromString(blob), at, principal)
            for blob, at, principal in rows
        ]

    def remove_framework(self, framework_id: str, reason: str) -> None:
        self._db.execute("DELETE FROM frameworks WHERE framework_id = ?", (framework_id,))
        self._write(
            "INSERT OR REPLACE INTO removed VALUES ('framework', ?, ?, ?)",
            (framework_id, time.time(), reason),  # real time: opened before the core, no clock
        )

    # removals -----------------------------------------------------------------------------

    def removed(self, kind: str) -> dict[str, str]:
        """id -> reason for every removed 'agent' or 'framework'."""
        rows = self._db.execute(
            "SELECT id, reason FROM removed WHERE kind = ? ORDER BY removed_at, rowid", (kind,)
        )
        return dict(rows)

    def forget_removed(self, kind: str, ids: list[str]) -> None:
        self._db.executemany(
            "DELETE FROM removed WHERE kind = ? AND id = ?", [(kind, i) for i in ids]
        )
        self._db.commit()

    # weights and quota --------------------------------------------------------------------

    def put_weight(self, role: str, weight: float) -> None:
        self._write("INSERT OR REPLACE INTO weights VALUES (?, ?)", (role, weight))

    def weights(self) -> dict[str, float]:
        return dict(self._db.execute("SELECT role, weight FROM weights"))

    def put_quota(self, role: str, quota: operator_pb2.Quota | None) -> None:
        if quota is None:
            self._write("DELETE FROM quotas WHERE role = ?", (role,))
        else:
            self._write(
                "INSERT OR REPLACE INTO quotas VALUES (?, ?)", (role, quota.SerializeToString())
            )

    def quotas(self) -> dict[str, operator_pb2.Quota]:
        rows = self._db.execute("SELECT role, quota FROM quotas")
        return {role: operator_pb2.Quota.FromString(blob) for role, blob in rows}

    # preemptions ---------------------------------------------------------------------------

    def put_preemption(self, preemption: operator_pb2.PreemptionSummary) -> None:
        self._write(
            "INSERT OR REPLACE INTO preemptions VALUES (?, ?, ?, ?)",
            (
                preemption.framework_id,
                preemption.task_id,
                preemption.at,
                preemption.SerializeToString(),
            ),
        )

    def preemptions(self) -> list[operator_pb2.PreemptionSummary]:
        out = []
        for (data,) in self._db.execute("SELECT data FROM preemptions ORDER BY at"):
            summary = operator_pb2.PreemptionSummary()
            summary.ParseFromString(data)
            out.append(summary)
        return out

    def forget_preemptions(self, keys: list[tuple[str, str]]) -> None:
        self._db.executemany("DELETE FROM preemptions WHERE framework_id = ? AND task_id = ?", keys)
        self._db.commit()

    # drained agents -----------------------------------------------------------------------

    def put_drained(self, agent_id: str, draining: bool, deadline: float = 0.0) -> None:
        if draining:
            self._write("INSERT OR REPLACE INTO drained VALUES (?, ?)", (agent_id, deadline))
        else:
            self._write("DELETE FROM drained WHERE agent_id = ?", (agent_id,))

    def drained(self) -> dict[str, float]:
        return dict(self._db.execute("SELECT agent_id, deadline FROM drained"))

    # join tokens ------------------------------------------------------------------------

    def spend_join_token(self, token_id: str, expires: float) -> bool:
        # Forgotten a day after they expire: masters whose clocks differ a little still agree.
        # Real time: the store is opened (open_store) before the core and its clock, and a
        # token's expiry is real time.
        horizon = time.time() - SPENT_TOKEN_MARGIN
        self._db.execute("DELETE FROM join_tokens_spent WHERE expires < ?", (horizon,))
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO join_tokens_spent VALUES (?, ?)", (token_id, expires)
        )
        self._db.commit()
        return cursor.rowcount == 1


SPENT_TOKEN_MARGIN = 86400.0


def _add_columns(db: sqlite3.Connection) -> None:
    """A state dir made before drains had deadlines, or before agents and frameworks kept
    their principals: the columns are added (no deadline, no principal known)."""
    added = {
        "drained": "deadline REAL NOT NULL DEFAULT 0",
        "agents": "principal TEXT NOT NULL DEFAULT ''",
        "frameworks": "principal TEXT NOT NULL DEFAULT ''",
    }
    for table, column in added.items():
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column.split()[0] not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
