"""The seam of the master's durable registry: what any store must do, and which one to open.

The master reads and writes its registry (admitted agents and frameworks, removals, weights,
quota, drained agents, recent preemptions) only through `RegistryStore`. SQLite under --state-dir
(master/state_store.py) is the embedded default of a single master; ZooKeeper
(master/zk_store.py), for several masters with one leader (--zk), implements the same protocol.
Tasks are never stored: agents report what they run, and keep every status update until the
framework has acknowledged it, so nothing about tasks needs to survive a failover. The one
exception is the master's own decision to stop a task for another role: the recent preemptions
are kept, so that `agora cluster preemptions` and a reconciliation still tell them after one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from agora.v1 import common_pb2, operator_pb2

log = structlog.get_logger(__name__)

__all__ = ["RegistryStore", "StoredAgent", "StoredFramework", "forget_removed", "open_store"]


@dataclass(frozen=True)
class StoredAgent:
    info: common_pb2.AgentInfo
    registered_at: float
    # Who registered it: after a restart or failover only they may register under its id.
    principal: str = ""


@dataclass(frozen=True)
class StoredFramework:
    info: common_pb2.FrameworkInfo
    registered_at: float
    # Who subscribed it: after a restart or failover only they may fail over to it.
    principal: str = ""


class RegistryStore(Protocol):
    """Every write is durable when the call returns; reads return what was last written."""

    def put_agent(
        self, info: common_pb2.AgentInfo, registered_at: float, principal: str = ""
    ) -> None: ...

    def agents(self) -> list[StoredAgent]: ...

    def remove_agent(self, agent_id: str, reason: str) -> None: ...

    def put_framework(
        self, info: common_pb2.FrameworkInfo, registered_at: float, principal: str = ""
    ) -> None: ...

    def frameworks(self) -> list[StoredFramework]: ...

    def remove_framework(self, framework_id: str, reason: str) -> None: ...

    def removed(self, kind: str) -> dict[str, str]:
        """{id: reason} of removed agents (kind "agent") or frameworks ("framework"), oldest
        removal first."""
        ...

    def forget_removed(self, kind: str, ids: list[str]) -> None:
        """Drops these removals (past the master's bound on how many it remembers)."""
        ...

    def put_weight(self, role: str, weight: float) -> None: ...

    def weights(self) -> dict[str, float]: ...

    def put_quota(self, role: str, quota: operator_pb2.Quota | None) -> None: ...

    def quotas(self) -> dict[str, operator_pb2.Quota]: ...

    def put_drained(self, agent_id: str, draining: bool, deadline: float = 0.0) -> None:
        """Marks an agent drained (an operator's decision that must outlive a failover), with
        the deadline of its tasks (Unix seconds; 0: none)."""
        ...

    def drained(self) -> dict[str, float]:
        """Drained agents and their deadlines."""
        ...

    def put_preemption(self, preemption: operator_pb2.PreemptionSummary) -> None:
        """Keeps a preemption (by framework and task id: a later put replaces it)."""
        ...

    def preemptions(self) -> list[operator_pb2.PreemptionSummary]:
        """The preemptions kept, oldest first."""
        ...

    def forget_preemptions(self, keys: list[tuple[str, str]]) -> None:
        """Drops these (framework id, task id) preemptions (past the master's bound)."""
        ...

    def spend_join_token(self, token_id: str, expires: float) -> bool:
        """Marks a join token used; False if it was already (a token joins one machine, once,
        whichever master it reaches). Spent tokens are forgotten once past `expires`."""
        ...

    def describe(self) -> str:
        """Where the registry lives, for the log (a file, "memory", a ZooKeeper path)."""
        ...

    def close(self) -> None: ...


def open_store(state_path: Path | None) -> RegistryStore:
    """The store a master's configuration names: SQLite at `state_path` (None: in memory)."""
    from agora.master.state_store import StateStore

    return StateStore(state_path)


def forget_removed(store: RegistryStore, kind: str, ids: list[str]) -> None:
    """Drops removals past the registry's bounds (Registry.note_removed) from the store too."""
    if ids:
        store.forget_removed(kind, ids)
        log.info(f"forgot removed {kind}s past the bound", count=len(ids))
