"""The master's registry in ZooKeeper (a RegistryStore), for several masters with one leader.

A new leader on another machine reads exactly what the old one wrote. Layout under <path>:

    registry/agents/<id>          registered_at (8 bytes, big-endian double) + AgentInfo
    registry/frameworks/<id>      registered_at + FrameworkInfo
    registry/removed/agent/<id>   why it was removed (UTF-8); likewise removed/framework/<id>
    registry/weights/<role>       the weight, as text
    registry/quotas/<role>        Quota
    registry/drained/<id>         drain deadline, Unix seconds ("0.0": none)
    registry/join-tokens-spent/<id>   the token's expiry, Unix seconds
    registry/preemptions/<framework id>:<task id>   PreemptionSummary

Roles may contain '/', so every name is percent-encoded.

Fencing: every write is a transaction that first checks the leader's own election znode. That
znode is ephemeral: once the leader's session has expired (and a successor may have been
elected) the check fails and nothing is written, so a deposed leader can never overwrite its
successor's registry. The write raises StoreFenced and the master stops acting.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from agora.master.registry_store import StoredAgent, StoredFramework
from agora.v1 import common_pb2, operator_pb2

__all__ = ["StoreFenced", "ZkRegistryStore"]

_STAMP = struct.Struct(">d")
_DIRS = (
    "agents",
    "frameworks",
    "removed/agent",
    "removed/framework",
    "weights",
    "quotas",
    "drained",
    "join-tokens-spent",
    "preemptions",
)


class StoreFenced(RuntimeError):
    """This master no longer holds its election znode: it must not write (nor act) any more."""


def _name(key: str) -> str:
    return quote(key, safe="")


class ZkRegistryStore:
    """The registry under `<path>/registry`. `fence`: the election znode every write checks
    (None: unfenced, for tools and tests)."""

    def __init__(
        self,
        zk: KazooClient,
        path: str,
        fence: str | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self._zk = zk
        self._base = f"{path.rstrip('/')}/registry"
        self._fence = fence
        self._on_fenced = on_fenced
        for d in _DIRS:
            zk.ensure_path(f"{self._base}/{d}")

    def describe(self) -> str:
        return f"zookeeper {self._base}"

    def close(self) -> None:
        pass  # the client belongs to the leadership that opened this store

    # --- writes: fenced transactions ----------------------------------------------------------

    def _commit(self, build) -> list:
        tx = self._zk.transaction()
        if self._fence is not None:
            tx.check(self._fence, -1)  # -1: any version; the znode must exist
        build(tx)
        results = tx.commit()
        # A failed check is an error of its own; a check that passed while a later op failed
        # comes back as RolledBackError.
        fenced = isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError)
        if self._fence is not None and fenced:
            if self._on_fenced is not None:
                self._on_fenced()
            raise StoreFenced(f"lost the election znode {self._fence}; not writing")
        return results[1:] if self._fence is not None else results

    def _put(self, path: str, data: bytes) -> None:
        results = self._commit(lambda tx: tx.set_data(path, data))
        if isinstance(results[0], NoNodeError):
            results = self._commit(lambda tx: tx.create(path, data))
            if isinstance(results[0], NodeExistsError):  # created meanwhile: set it after all
                results = self._commit(lambda tx: tx.set_data(path, data))
        _raise_first(results)

    def _delete(self, path: str) -> None:
        results = self._commit(lambda tx: tx.delete(path))
        if not isinstance(results[0], NoNodeError):
            _raise_first(results)

    def _move_to_removed(self, kind: str, key: str, reason: str) -> None:
        """Deletes the live entry (and its drain mark), then records the removal."""
        live = f"{self._base}/{kind}s/{_name(key)}"
        removed = f"{self._base}/removed/{kind}/{_name(key)}"
        extra = [f"{self._base}/drained/{_name(key)}"] if kind == "agent" else []
        for path in [live, *extra]:
            self._delete(path)
        self._put(removed, reason.encode())

    # --- agents and frameworks ----------------------------------------------------------------

    def put_agent(
        self, info: common_pb2.AgentInfo, registered_at: float, principal: str = ""
    ) -> None:
        self._put(
            f"{self._base}/agents/{_name(info.agent_id)}",
            _entry(registered_at, principal, info.SerializeToString()),
        )

    def agents(self) -> list[StoredAgent]:
        out = []
        for _, data in self._read_all("agents"):
            at, principal, blob = _unentry(data)
            out.append(StoredAgent(common_pb2.AgentInfo.FromString(blob), at, principal))
        return out

    def remove_agent(self, agent_id: str, reason: str) -> None:
        self._move_to_removed("agent", agent_id, reason)

    def put_framework(
        self, info: common_pb2.FrameworkInfo, registered_at: float, principal: str = ""
    ) -> None:
        self._put(
            f"{self._base}/frameworks/{_name(info.framework_id)}",
            _entry(registered_at, principal, info.SerializeToString()),
        )

    def frameworks(self) -> list[StoredFramework]:
        out = []
        for _, data in self._read_all("frameworks"):
            at, principal, blob = _unentry(data)
            out.append(StoredFramework(common_pb2.FrameworkInfo.FromString(blob), at, principal))
        return out

    def remove_framework(self, framework_id: str, reason: str) -> None:
        self._move_to_removed("framework", framework_id, reason)

    def removed(self, kind: str) -> dict[str, str]:
        rows = self._read_all(f"removed/{kind}", by_creation=True)
        return {key: data.decode() for key, data in rows}

    def forget_removed(self, kind: str, ids: list[str]) -> None:
        for removed_id in ids:
            self._delete(f"{self._base}/removed/{kind}/{_name(removed_id)}")

    # --- weights, quota, drains ---------------------------------------------------------------

    def put_weight(self, role: str, weight: float) -> None:
        self._put(f"{self._base}/weights/{_name(role)}", repr(weight).encode())

    def weights(self) -> dict[str, float]:
        return {role: float(data) for role, data in self._read_all("weights")}

    def put_quota(self, role: str, quota: operator_pb2.Quota | None) -> None:
        path = f"{self._base}/quotas/{_name(role)}"
        if quota is None:
            self._delete(path)
        else:
            self._put(path, quota.SerializeToString())

    def quotas(self) -> dict[str, operator_pb2.Quota]:
        return {
            role: operator_pb2.Quota.FromString(data) for role, data in self._read_all("quotas")
        }

    def put_drained(self, agent_id: str, draining: bool, deadline: float = 0.0) -> None:
        path = f"{self._base}/drained/{_name(agent_id)}"
        if draining:
            self._put(path, repr(deadline).encode())
        else:
            self._delete(path)

    def drained(self) -> dict[str, float]:
        # Empty data: a drain written before drains had deadlines.
        return {key: float(data or b"0") for key, data in self._read_all("drained")}

    def put_preemption(self, preemption: operator_pb2.PreemptionSummary) -> None:
        key = f"{preemption.framework_id}:{preemption.task_id}"
        self._put(f"{self._base}/preemptions/{_name(key)}", preemption.SerializeToString())

    def preemptions(self) -> list[operator_pb2.PreemptionSummary]:
        out = []
        for _, data in self._read_all("preemptions"):
            summary = operator_pb2.PreemptionSummary()
            summary.ParseFromString(data)
            out.append(summary)
        return sorted(out, key=lambda p: p.at)

    def forget_preemptions(self, keys: list[tuple[str, str]]) -> None:
        for framework_id, task_id in keys:
            self._delete(f"{self._base}/preemptions/{_name(f'{framework_id}:{task_id}')}")

    def spend_join_token(self, token_id: str, expires: float) -> bool:
        # The create is the test-and-set: of two masters (or two calls) only one succeeds.
        path = f"{self._base}/join-tokens-spent/{_name(token_id)}"
        results = self._commit(lambda tx: tx.create(path, repr(expires).encode()))
        if isinstance(results[0], NodeExistsError):
            return False
        _raise_first(results)
        self._forget_spent_tokens()
        return True

    def _forget_spent_tokens(self) -> None:
        """Spent tokens past their expiry cannot be used anyway: forgotten."""
        # A day late: masters' clocks may differ a little. Real time: a store is opened before
        # the core and its clock (leadership), and a token's expiry is real time.
        horizon = time.time() - 86400.0
        for key, data in self._read_all("join-tokens-spent"):
            if float(data or b"0") < horizon:
                self._delete(f"{self._base}/join-tokens-spent/{_name(key)}")

    # --- reads --------------------------------------------------------------------------------

    def _read_all(self, folder: str, by_creation: bool = False) -> list[tuple[str, bytes]]:
        """(key, data) of every child of `folder`, sorted by key (or, `by_creation`, oldest
        first). The reads are pipelined (all sent, then all awaited): a new leader loading
        10,000 agents waits for one round trip, not 10,000."""
        base = f"{self._base}/{folder}"
        names = sorted(self._zk.get_children(base))
        pending = [(name, self._zk.get_async(f"{base}/{name}")) for name in names]
        out = []
        for name, result in pending:
            try:
                data, stat = result.get()
            except NoNodeError:
                continue  # deleted between the listing and the read
            out.append((stat.czxid, unquote(name), data))
        if by_creation:
            out.sort(key=lambda row: row[0])
        return [(key, data) for _, key, data in out]


def _stamp(data: bytes) -> float:
    return _STAMP.unpack_from(data)[0]


def _raise_first(results: list) -> None:
    for result in results:
        if isinstance(result, Exception):
            raise result


# An agent's or framework's node: its registration time, then (a zero byte, which no protobuf
# message starts with, and a 2-byte length) who registered it, then its info. A node written
# before principals were kept has the info right after the time.
_WITH_PRINCIPAL = b"\x00"
_LENGTH = struct.Struct(">H")


def _entry(registered_at: float, principal: str, blob: bytes) -> bytes:
    name = principal.encode()
    return _STAMP.pack(registered_at) + _WITH_PRINCIPAL + _LENGTH.pack(len(name)) + name + blob


def _unentry(data: bytes) -> tuple[float, str, bytes]:
    at, rest = _stamp(data), data[_STAMP.size :]
    if not rest.startswith(_WITH_PRINCIPAL):
        return at, "", rest
    (length,) = _LENGTH.unpack_from(rest, 1)
    start = 1 + _LENGTH.size
    return at, rest[start : start + length].decode(), rest[start + length :]
