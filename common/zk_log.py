"""A replicated log of opaque entries on ZooKeeper, fenced on a leader's election znode, with
snapshots that bound its length.

The highly available batch and services daemons keep their state in it (frameworks/sdk/
replication.py writes each committed SQLite transaction as one entry): the leader appends,
every standby reads, and a new leader on another machine starts from exactly what its
predecessor committed. Layout under <path>:

    log/entry-<10-digit sequence>   an entry: b"E" + zlib(data), or b"P" + JSON list of parts
    parts/<name>                    512 KB pieces of a large entry or of a snapshot
    snapshot                        JSON {"seq", "parts", "bytes"}: the state after entry `seq`

Fencing: an append is one transaction that first checks the leader's own (ephemeral) election
znode, as the master's registry does (master/zk_store.py): once the leader's session expired,
and a successor may lead, nothing it appends lands. So a new leader that syncs and reads the
log after its election has every entry the old one could ever write.

Reading races compaction (the leader deletes entries once a snapshot covers them). A reader
lists the entries first, then reads the snapshot pointer: an entry it needs that was deleted
before the listing is covered by that pointer; one deleted after makes its read fail, and the
reader starts over (`Stale`).

ZooKeeper sequence numbers grow with every child created or deleted, so they order entries but
leave gaps; only order is relied on.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, RolledBackError

__all__ = ["AppendUncertain", "CatchUp", "LogFenced", "Stale", "ZkLog"]

PART_BYTES = 512 * 1024  # under ZooKeeper's 1 MB default request limit (jute.maxbuffer)
# Seconds an append waits for ZooKeeper's answer. A leader's lease (0.8 of its session) runs
# out sooner when ZooKeeper is away; this only bounds how long the writer's thread is held.
APPEND_TIMEOUT = 5.0
_INLINE = b"E"
_PARTS = b"P"


class LogFenced(RuntimeError):
    """The election znode the appends check is gone: this writer no longer leads."""


class AppendUncertain(RuntimeError):
    """An append got no answer: it may have landed or not. The writer must stop writing."""


class Stale(RuntimeError):
    """What was listed was deleted before it was read (a compaction ran): read again."""


@dataclass
class CatchUp:
    """What a reader that had applied up to `after` must apply, in order: the snapshot first
    when there is one (it replaces the state), then the entries."""

    snapshot: tuple[int, bytes] | None
    entries: list[tuple[int, bytes]]

    @property
    def last(self) -> int | None:
        if self.entries:
            return self.entries[-1][0]
        return self.snapshot[0] if self.snapshot is not None else None


def _seq(name: str) -> int:
    return int(name[-10:])


class ZkLog:
    """The log under `path`. `fence`: the election znode every append checks (None: unfenced,
    for readers and tests); `on_fenced` is called when an append finds it gone, and
    `on_uncertain(why)` when an append got no answer."""

    def __init__(
        self,
        zk: KazooClient,
        path: str,
        fence: str | None = None,
        on_fenced: Callable[[], None] | None = None,
        on_uncertain: Callable[[str], None] | None = None,
    ) -> None:
        self._zk = zk
        self.on_uncertain = on_uncertain
        self.path = path.rstrip("/")
        self._log = f"{self.path}/log"
        self._parts = f"{self.path}/parts"
        self._pointer = f"{self.path}/snapshot"
        self.fence = fence
        self.on_fenced = on_fenced
        # Parts of entries still in the log (sequence -> part names), to delete with them.
        self._entry_parts: dict[int, list[str]] = {}
        for folder in (self._log, self._parts):
            zk.ensure_path(folder)

    def describe(self) -> str:
        return f"zookeeper {self.path}"

    # --- writing (the leader) -----------------------------------------------------------------

    def append(self, data: bytes) -> int:
        """Appends one entry; returns its sequence number. Raises LogFenced once this writer
        no longer leads; AppendUncertain when no answer came (the connection dropped, or none
        within APPEND_TIMEOUT): the entry may have landed or not, so `on_uncertain` is called
        first, and the writer must stop writing (a leader steps down: its successor reads the
        log, the only truth)."""
        packed = zlib.compress(data, 1)
        parts: list[str] = []
        if len(packed) + 1 > PART_BYTES:
            parts = self._write_parts(f"entry-{uuid.uuid4().hex}", packed)
            body = _PARTS + json.dumps(parts).encode()
        else:
            body = _INLINE + packed
        tx = self._zk.transaction()
        if self.fence is not None:
            tx.check(self.fence, -1)  # -1: any version; the znode must exist
        tx.create(f"{self._log}/entry-", body, sequence=True)
        try:
            results = tx.commit_async().get(timeout=APPEND_TIMEOUT)
        except Exception as e:  # noqa: BLE001 - no answer: the outcome is unknown
            why = f"no answer from ZooKeeper to an append ({type(e).__name__}: {e})"
            if self.on_uncertain is not None:
                self.on_uncertain(why)
            raise AppendUncertain(why) from e
        created = results[-1]
        if isinstance(created, Exception):
            self._delete_parts(parts)
            first = results[0]
            if self.fence is not None and not isinstance(first, RolledBackError):
                if self.on_fenced is not None:
                    self.on_fenced()
                raise LogFenced(f"lost the election znode {self.fence}; not writing")
            raise created
        seq = _seq(created)
        if parts:
            self._entry_parts[seq] = parts
        return seq

    def append_async(self, data: bytes, done: Callable[[int | None, Exception | None], None]):
        """Appends one small entry (at most a part's size, compressed) without waiting:
        `done(seq, None)` or `done(None, error)` is called on kazoo's thread. Appends from one
        client land in the order they were sent. LogFenced is the error once this writer no
        longer leads."""
        body = _INLINE + zlib.compress(data, 1)
        if len(body) > PART_BYTES:
            raise ValueError(f"an entry of {len(body)} bytes; append_async takes {PART_BYTES}")
        tx = self._zk.transaction()
        if self.fence is not None:
            tx.check(self.fence, -1)
        tx.create(f"{self._log}/entry-", body, sequence=True)

        def landed(result) -> None:
            try:
                results = result.get()
            except Exception as e:  # noqa: BLE001 - the connection: the caller retries
                done(None, e)
                return
            created = results[-1]
            if not isinstance(created, Exception):
                done(_seq(created), None)
            elif self.fence is not None and not isinstance(results[0], RolledBackError):
                if self.on_fenced is not None:
                    self.on_fenced()
                done(None, LogFenced(f"lost the election znode {self.fence}; not writing"))
            else:
                done(None, created)

        tx.commit_async().rawlink(landed)

    def forget(self, seqs: list[int]) -> None:
        """Deletes these entries without waiting (a bounded history kept without snapshots:
        the oldest entries go)."""
        for seq in seqs:
            self._zk.delete_async(f"{self._log}/entry-{seq:010d}")

    def compact(self, seq: int, state: bytes) -> int:
        """Stores `state` as the snapshot after entry `seq`, then deletes the entries it covers
        and older snapshots' parts. Returns the snapshot's size in bytes (compressed)."""
        packed = zlib.compress(state, 1)
        parts = self._write_parts(f"snap-{seq:010d}", packed)
        pointer = json.dumps({"seq": seq, "parts": parts, "bytes": len(packed)}).encode()
        tx = self._zk.transaction()
        if self.fence is not None:
            tx.check(self.fence, -1)
        if self._zk.exists(self._pointer) is None:
            tx.create(self._pointer, pointer)
        else:
            tx.set_data(self._pointer, pointer)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            self._delete_parts(parts)
            if self.fence is not None and not isinstance(results[0], RolledBackError):
                if self.on_fenced is not None:
                    self.on_fenced()
                raise LogFenced(f"lost the election znode {self.fence}; not compacting")
            raise next(r for r in results if isinstance(r, Exception))
        # The pointer names the new snapshot: what it covers may go (safe even if this writer
        # is deposed meanwhile, since a successor's snapshots are always later).
        covered = [n for n in self._zk.get_children(self._log) if _seq(n) <= seq]
        old_parts = [
            n for n in self._zk.get_children(self._parts) if n.startswith("snap-") and n < parts[0]
        ]
        doomed = [f"{self._log}/{n}" for n in covered]
        for n in covered:
            doomed.extend(f"{self._parts}/{p}" for p in self._entry_parts.pop(_seq(n), []))
        doomed.extend(f"{self._parts}/{p}" for p in old_parts)
        self._delete_all(doomed)
        return len(packed)

    def _write_parts(self, prefix: str, packed: bytes) -> list[str]:
        names = [
            f"{prefix}-{i // PART_BYTES:05d}" for i in range(0, max(len(packed), 1), PART_BYTES)
        ]
        pending = [
            self._zk.create_async(
                f"{self._parts}/{name}", packed[i * PART_BYTES : (i + 1) * PART_BYTES]
            )
            for i, name in enumerate(names)
        ]
        for result in pending:
            result.get()
        return names

    def _delete_parts(self, names: list[str]) -> None:
        try:
            self._delete_all([f"{self._parts}/{n}" for n in names])
        except Exception:  # noqa: BLE001 - best effort: orphans cost space, never correctness
            pass

    def _delete_all(self, paths: list[str]) -> None:
        pending = [self._zk.delete_async(p) for p in paths]
        for result in pending:
            try:
                result.get()
            except NoNodeError:
                pass

    # --- reading (standbys, and a new leader before it leads) ---------------------------------

    def read_after(self, after: int, sync: bool = False) -> CatchUp:
        """What a reader that applied everything up to `after` (-1: nothing) must apply next.
        `sync` first makes the server catch up with the quorum (a new leader must read all
        that was committed). Raises Stale when a compaction deleted what it listed."""
        if sync:
            self._zk.sync(self.path)
        names = sorted(self._zk.get_children(self._log), key=_seq)
        snapshot = None
        try:
            raw, _ = self._zk.get(self._pointer)
        except NoNodeError:
            raw = b""
        if raw:
            pointer = json.loads(raw)
            if pointer["seq"] > after:
                snapshot = (pointer["seq"], zlib.decompress(self._read_parts(pointer["parts"])))
                after = pointer["seq"]
        wanted = [n for n in names if _seq(n) > after]
        pending = [(n, self._zk.get_async(f"{self._log}/{n}")) for n in wanted]
        entries = []
        for name, result in pending:
            try:
                body, _ = result.get()
            except NoNodeError:
                raise Stale(f"{name} was compacted away while being read") from None
            if body[:1] == _PARTS:
                parts = json.loads(body[1:])
                self._entry_parts[_seq(name)] = parts
                entries.append((_seq(name), zlib.decompress(self._read_parts(parts))))
            else:
                entries.append((_seq(name), zlib.decompress(body[1:])))
        return CatchUp(snapshot, entries)

    def _read_parts(self, names: list[str]) -> bytes:
        pending = [self._zk.get_async(f"{self._parts}/{n}") for n in names]
        try:
            return b"".join(result.get()[0] for result in pending)
        except NoNodeError:
            raise Stale("a part was deleted while being read") from None
