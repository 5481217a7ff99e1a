"""StateStore: a framework daemon's SQLite file, with its framework id in a `meta` table."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # kazoo is loaded only by a daemon that is one of a set
    from agora.frameworks.sdk.replication import ReplicatedDatabase

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"


class StateStore:
    """Base of a framework's store: opens the file and creates `SCHEMA` (a subclass's tables).

    `path` None keeps everything in memory (a restart forgets); a ReplicatedDatabase
    (replication.py) keeps it in ZooKeeper, for a daemon run as a highly available set. The
    connection autocommits: each statement is its own transaction unless a subclass opens one
    with BEGIN.
    """

    SCHEMA = ""

    def __init__(self, path: Path | str | ReplicatedDatabase | None) -> None:
        if path is not None and not isinstance(path, str | Path):  # a ReplicatedDatabase
            self.path: Path | str | None = path.describe()
            # The methods of a connection that stores use: typed as one.
            self._db: sqlite3.Connection = path  # type: ignore[assignment]
            self._db.executescript(_META + self.SCHEMA)
            return
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(
            str(path) if path is not None else ":memory:", isolation_level=None
        )
        # WAL + NORMAL: a committed write survives a daemon crash; only an OS crash may lose
        # the last moments, which the master's reconciliation then repairs.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_META + self.SCHEMA)

    def close(self) -> None:
        self._db.close()

    def framework_id(self) -> str:
        """The id the master gave this framework; "" before the first subscription."""
        row = self._db.execute("SELECT value FROM meta WHERE key='framework_id'").fetchone()
        return row[0] if row else ""

    def set_framework_id(self, framework_id: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('framework_id', ?)", (framework_id,)
        )
