"""A framework's SQLite state replicated through ZooKeeper, for daemons run as highly available
sets (`agora batch --zk`, `agora services --zk`, or any SDK daemon with a `zk` config).

`ReplicatedDatabase` stands where a StateStore's sqlite3 connection stands: the store's code is
the same. The database itself is in memory; what makes it durable is the log
(common/zk_log.py): every transaction's writes (INSERT, REPLACE, UPDATE, DELETE, with their
parameters) are appended to the log as one entry when it commits, and the local COMMIT happens
only once ZooKeeper has the entry. If the append fails the transaction is rolled back and the
commit raises sqlite3.OperationalError, as a failed disk write does (the stores keep what was
noted and acknowledge nothing until a commit succeeds). An append refused because this daemon
no longer leads lands nowhere; one that got no answer may have landed, so the leader steps down
there and then (`ZkLog.on_uncertain`): its successor, maybe itself restarted, reads the log,
which stays the one truth. A write outside a transaction is its own transaction. Any other
statement that could change the database (CREATE outside the schema, ALTER, a WITH ... INSERT)
is refused: a copy would not see it.

A standby applies the same entries in the same order (`catch_up`), so its copy is the leader's
state as of the last entry it read; a new leader catches up after a sync and starts from
exactly what its predecessor committed. Replaying requires the statements to be deterministic
(no random() or time functions in SQL): the stores bind every value as a parameter.

The log is bounded by snapshots: once what was appended since the last snapshot outgrows the
snapshot itself (and at least `COMPACT_BYTES`), the leader stores the whole database
(`sqlite3.Connection.serialize`) and the entries it covers are deleted. The cost of a snapshot
is thus spread over at least as many bytes of log as it writes.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import structlog

from agora.common.zk_log import Stale, ZkLog

log = structlog.get_logger(__name__)

__all__ = ["ReplicatedDatabase"]

COMPACT_BYTES = 4 * 1024 * 1024  # the log's bytes since the last snapshot before compacting
COMPACT_ENTRIES = 20_000  # ... or this many entries (a long listing slows every reader)
_WRITES = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE"})
_TRANSACTION = frozenset({"BEGIN", "COMMIT", "END", "ROLLBACK"})
_READS = frozenset({"SELECT", "EXPLAIN", "PRAGMA"})  # PRAGMA: the in-memory copy's own


def _verb(sql: str) -> str:
    return sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""


def _encode(value):
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b": base64.b64encode(bytes(value)).decode()}
    return value


def _decode(value):
    if isinstance(value, dict):
        return base64.b64decode(value["b"])
    return value


def _check_write(verb: str, parameters) -> None:
    if verb not in _WRITES:
        raise sqlite3.OperationalError(
            f"{verb or 'an empty statement'}: only INSERT, REPLACE, UPDATE and DELETE are "
            "replicated (the schema goes through executescript)"
        )
    if isinstance(parameters, dict):
        raise sqlite3.ProgrammingError("replicated statements take positional parameters")


def encode_entry(statements: list[tuple[str, list | None]]) -> bytes:
    """One transaction's writes as bytes: [[sql, [row, ...]], ...], bytes as {"b": base64};
    a schema script alone as [[script, null]]."""
    return json.dumps(
        [
            [sql, None if rows is None else [[_encode(v) for v in row] for row in rows]]
            for sql, rows in statements
        ],
        separators=(",", ":"),
    ).encode()


def decode_entry(data: bytes) -> list[tuple[str, list[list] | None]]:
    return [
        (sql, None if rows is None else [[_decode(v) for v in row] for row in rows])
        for sql, rows in json.loads(data)
    ]


class ReplicatedDatabase:
    """An in-memory SQLite database whose committed writes go to `zk_log` first.

    The methods a StateStore uses of a sqlite3 connection: execute, executemany, executescript
    (the schema: run locally, never logged, the same on every member), the context manager,
    commit, rollback and close."""

    def __init__(self, zk_log: ZkLog) -> None:
        self.log = zk_log
        # check_same_thread off: a standby catches up from a worker thread while the loop waits.
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.applied = -1  # the last log entry this copy holds (ZooKeeper counts from 0)
        self._open: list[tuple[str, list | None]] | None = None  # the open transaction's writes
        self._snapshot_bytes = 0
        self._since_snapshot = 0  # bytes appended (or applied) since the last snapshot
        self._entries_since = 0
        self._reading = threading.Lock()  # one catch-up at a time (a follower's, a leader's)

    def describe(self) -> str:
        return self.log.describe()

    # --- following the log --------------------------------------------------------------------

    def catch_up(self, sync: bool = False) -> int:
        """Applies what the log has beyond this copy (blocking: ZooKeeper is read); returns
        how many entries were applied. `sync`: read through the quorum first (a new leader)."""
        with self._reading:
            return self._catch_up(sync)

    def _catch_up(self, sync: bool) -> int:
        while True:
            try:
                news = self.log.read_after(self.applied, sync=sync)
                break
            except Stale:
                time.sleep(0.05)  # a compaction ran meanwhile: its snapshot covers what went
                continue
        if news.snapshot is not None:
            seq, state = news.snapshot
            self._db.deserialize(state)
            self.applied = seq
            self._snapshot_bytes, self._since_snapshot, self._entries_since = len(state), 0, 0
        for seq, data in news.entries:
            self._apply(decode_entry(data))
            self.applied = seq
            self._since_snapshot += len(data)
            self._entries_since += 1
        return len(news.entries)

    def _apply(self, statements: list[tuple[str, list[list] | None]]) -> None:
        if len(statements) == 1 and statements[0][1] is None:  # a leader's schema
            self._db.executescript(statements[0][0])
            return
        self._db.execute("BEGIN")
        try:
            for sql, rows in statements:
                self._db.executemany(sql, rows or [])
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- what a StateStore calls ----------------------------------------------------------------

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        verb = _verb(sql)
        if verb in _TRANSACTION:
            return self._transaction(verb, sql)
        if verb in _READS:
            return self._db.execute(sql, parameters)
        _check_write(verb, parameters)
        if not self.leading:
            raise sqlite3.OperationalError("a standby's copy is written by the log only")
        if self._open is None:  # a write on its own: its own transaction
            self._transaction("BEGIN", "BEGIN")
            try:
                cursor = self.execute(sql, parameters)
            except BaseException:
                self._transaction("ROLLBACK", "ROLLBACK")
                raise
            self._transaction("COMMIT", "COMMIT")
            return cursor
        cursor = self._db.execute(sql, parameters)
        self._open.append((sql, [list(parameters)]))
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        rows = [list(row) for row in rows]
        verb = _verb(sql)
        if verb in _READS:
            return self._db.executemany(sql, rows)
        _check_write(verb, rows[0] if rows else ())
        if not self.leading:
            raise sqlite3.OperationalError("a standby's copy is written by the log only")
        if self._open is None:
            self._transaction("BEGIN", "BEGIN")
            try:
                cursor = self.executemany(sql, rows)
            except BaseException:
                self._transaction("ROLLBACK", "ROLLBACK")
                raise
            self._transaction("COMMIT", "COMMIT")
            return cursor
        cursor = self._db.executemany(sql, rows)
        if rows:
            self._open.append((sql, rows))
        return cursor

    def executescript(self, script: str) -> sqlite3.Cursor:
        """The store's schema (CREATE ... IF NOT EXISTS). A leader logs it too, so that every
        copy has the tables before the first entry that writes them, and a new version's new
        tables reach the standbys; a standby runs it locally only."""
        if self.leading:
            try:
                self.log.append(encode_entry([(script, None)]))
            except Exception as e:
                raise sqlite3.OperationalError(f"the schema was not stored: {e}") from e
        return self._db.executescript(script)

    @property
    def leading(self) -> bool:
        """Whether this copy may write: its log's appends are fenced on an election znode."""
        return self.log.fence is not None

    def commit(self) -> None:
        if self._open is not None:
            self._transaction("COMMIT", "COMMIT")

    def rollback(self) -> None:
        if self._open is not None:
            self._transaction("ROLLBACK", "ROLLBACK")

    def __enter__(self) -> ReplicatedDatabase:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.commit()
        else:
            self.rollback()

    def close(self) -> None:
        self._db.close()

    def _transaction(self, verb: str, sql: str) -> sqlite3.Cursor:
        if verb == "BEGIN":
            cursor = self._db.execute(sql)
            self._open = []
            return cursor
        statements, self._open = self._open, None
        if verb == "ROLLBACK" or not statements:
            return self._db.execute("ROLLBACK" if verb == "ROLLBACK" else "COMMIT")
        data = encode_entry(statements)
        try:
            seq = self.log.append(data)
        except Exception as e:
            # Refused (fenced), failed, or unanswered (the leader steps down: on_uncertain):
            # this copy goes back to the log's state as this leader knows it.
            self._db.execute("ROLLBACK")
            raise sqlite3.OperationalError(f"the state was not stored in ZooKeeper: {e}") from e
        cursor = self._db.execute("COMMIT")
        self.applied = seq
        self._since_snapshot += len(data)
        self._entries_since += 1
        if self._since_snapshot >= max(COMPACT_BYTES, self._snapshot_bytes) or (
            self._entries_since >= COMPACT_ENTRIES
        ):
            self._compact()
        return cursor

    def _compact(self) -> None:
        state = self._db.serialize()
        try:
            stored = self.log.compact(self.applied, state)
        except Exception as e:  # noqa: BLE001 - the log only grows until the next attempt
            log.warning("could not store a snapshot of the state", error=str(e))
            self._since_snapshot = self._entries_since = 0  # again after as much more
            return
        log.debug("state snapshot stored", seq=self.applied, bytes=len(state), compressed=stored)
        self._snapshot_bytes, self._since_snapshot, self._entries_since = len(state), 0, 0
