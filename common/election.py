"""Leader election among masters on ZooKeeper, and finding the leader from anywhere.

Mesos' scheme (its contender and detector): every master creates an ephemeral, sequential znode
under `<path>/election/` holding its MasterInfo; the lowest sequence number leads. A master that
dies loses its session, ZooKeeper deletes its znode after the session timeout, and the next one
in line leads. Agents, frameworks and clients read the same children to find the leader.

A contender reports the loss of leadership when its session is lost or its znode is gone. A
suspended connection is not reported: the leader's lease (common/lease.py) decides whether it
may go on acting while the client reconnects, so that a ZooKeeper server's restart costs no
failover while two masters still never act as leader at once.

The epoch of a leader is its znode's sequence number plus one (0 is left for a master alone): a
later leader always has a higher one.
Agents and frameworks take nothing from a master once ZooKeeper names one of a higher epoch.

kazoo calls back on its own thread: `on_change` must hand over to the caller's event loop
(loop.call_soon_threadsafe).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from agora.common.masters import MasterInfo

__all__ = [
    "Contender",
    "MasterInfo",
    "connect_leader_client",
    "find_leader",
    "leader_to_name",
    "list_masters",
    "zk_client",
    "znode_exists",
]

ELECTION = "election"
PREFIX = "member_"


def zk_client(hosts: str, session_timeout: float, max_retry_delay: float = 1.0) -> KazooClient:
    """A kazoo client that keeps retrying the connection for ever (ZooKeeper may come back),
    at most `max_retry_delay` seconds apart.

    kazoo's own log says "Connection dropped" at every retry (several a second while ZooKeeper
    is away); only its errors are kept, and our daemons say once that ZooKeeper is unreachable."""
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    return KazooClient(
        hosts=hosts,
        timeout=session_timeout,
        connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": max_retry_delay},
        command_retry={"max_tries": 3, "delay": 0.05, "max_delay": 0.5},
    )


async def connect_leader_client(
    hosts: str,
    session_timeout: float,
    granted: Callable[[float], None],
    on_waiting: Callable[[str], None] | None = None,
) -> KazooClient:
    """A started client for a daemon that leads or stands by (a master, a framework daemon of
    a set), once ZooKeeper answers: it keeps trying for ever, saying so every 2 s through the
    log and `on_waiting`. `granted(seconds)`: the session timeout ZooKeeper grants, at each
    connection. A leader whose ZooKeeper server went away must be back on another before its
    lease runs out: it retries every tenth of a session at most (kazoo's default backs off to
    1 s, which alone would outlast a 1.5 s session's lease during an ensemble's election)."""
    import asyncio

    zk = zk_client(hosts, session_timeout, min(1.0, session_timeout / 10))
    on_granted_timeout(zk, granted)
    connected = zk.start_async()
    waited = 0.0
    while not await asyncio.to_thread(connected.wait, 2.0):
        waited += 2.0
        message = f"ZooKeeper at {hosts} is unreachable; still trying ({waited:.0f} s)"
        structlog.get_logger(__name__).warning(message)
        if on_waiting is not None:
            on_waiting(message)
    return zk


def on_granted_timeout(zk: KazooClient, granted: Callable[[float], None]) -> None:
    """Calls `granted(seconds)` with the session timeout ZooKeeper grants at each connection,
    from kazoo's connection thread. kazoo keeps only the timeout it asked for; the server
    clamps it into its own bounds (2 to 20 ticks by default), and a leader's lease must be
    shorter than the session it really has. Install before `start`."""
    handler = getattr(zk, "_connection", None)
    connect = getattr(handler, "_connect", None)
    if connect is None:
        raise RuntimeError(
            "this kazoo version hides the session timeout ZooKeeper grants; a master cannot "
            "size its leader lease safely (install the kazoo version in pyproject.toml)"
        )

    def connected(host, hostip, port):
        read_timeout, connect_timeout = connect(host, hostip, port)
        # kazoo derives its read timeout as 2/3 of the granted session timeout (ms).
        granted(read_timeout * 1.5 / 1000.0)
        return read_timeout, connect_timeout

    setattr(handler, "_connect", connected)  # noqa: B010 - kazoo's private hook, checked above


def _sequence(name: str) -> int:
    return int(name.rsplit("_", 1)[-1])


def ordered_members(children: list[str]) -> list[str]:
    """Election znodes in line order: the first leads. Pure."""
    return sorted((c for c in children if c.startswith(PREFIX)), key=_sequence)


def list_masters(zk: KazooClient, path: str) -> list[MasterInfo]:
    """Every master standing for election under `path`, the leader first."""
    base = f"{path}/{ELECTION}"
    try:
        children = zk.get_children(base)
    except NoNodeError:
        return []
    out = []
    for name in ordered_members(children):
        try:
            data, _ = zk.get(f"{base}/{name}")
        except NoNodeError:
            continue  # gone between the listing and the read
        out.append(replace(MasterInfo.decode(data), epoch=_sequence(name) + 1))
    return out


def leader_to_name(members: list[MasterInfo], address: str, member_id: str) -> str:
    """The leader a standby at `address` names to callers ("" when none is known). Pure.

    Not the previous process on this very port, killed, whose znode has not expired yet:
    naming it would send callers back here."""
    first = members[0] if members else None
    if first is None or (first.address == address and first.master_id != member_id):
        return ""
    return first.address


def znode_exists(zk: KazooClient | None, node: str | None, timeout: float) -> bool:
    """Blocking (a lease keeper's probe): whether `node` still exists, read after a sync so
    that the answer comes through ZooKeeper's quorum leader (a follower cut off from the
    quorum could otherwise answer from a stale view)."""
    if zk is None or node is None:
        return False
    zk.sync_async(node)
    return zk.exists_async(node).get(timeout=timeout) is not None


def find_leader(zk: KazooClient, path: str) -> MasterInfo | None:
    masters = list_masters(zk, path)
    return masters[0] if masters else None


class Contender:
    """One master's candidacy. `on_change(leading, reason)` is called on kazoo's thread."""

    def __init__(
        self,
        zk: KazooClient,
        path: str,
        info: MasterInfo,
        on_change: Callable[[bool, str], None],
    ) -> None:
        self._zk = zk
        self._base = f"{path}/{ELECTION}"
        self._info = info
        self._on_change = on_change
        self._node: str | None = None
        self._leading = False
        # Once leadership is lost the candidacy is spent: the master exits rather than lead
        # again on state it may no longer hold (Mesos does the same).
        self._spent = False
        self._lock = threading.Lock()

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def epoch(self) -> int:
        """This candidacy's epoch, its sequence number plus one (0 before start)."""
        return _sequence(self._node) + 1 if self._node is not None else 0

    @property
    def node(self) -> str | None:
        """The path of this candidacy's ephemeral znode (None before start, after withdraw)."""
        return self._node

    def start(self) -> None:
        """Stands for election (the client must be started); calls on_change when elected."""
        self._zk.add_listener(self._on_state)
        self._zk.ensure_path(self._base)
        self._node = self._zk.create(
            f"{self._base}/{PREFIX}", self._info.encode(), ephemeral=True, sequence=True
        )
        self._zk.ChildrenWatch(self._base, self._on_children)

    def withdraw(self) -> None:
        """Leaves the election (a clean shutdown): the next master leads at once."""
        with self._lock:
            node, self._node = self._node, None
            self._leading = False
        if node is not None:
            try:
                self._zk.delete(node)
            except Exception:  # noqa: BLE001 - the session may be gone already; so is the node
                pass

    def _on_children(self, children: list[str]) -> bool | None:
        with self._lock:
            if self._node is None or self._spent:
                return False  # withdrawn or spent: stop watching
            line = ordered_members(children)
            mine = self._node.rsplit("/", 1)[-1]
            if mine not in line:
                # Our znode is gone: the session expired. A successor may lead already.
                self._spent = True
                if self._leading:
                    self._leading = False
                    self._on_change(False, "the election znode is gone (session expired)")
                return False
            if line[0] == mine and not self._leading:
                self._leading = True
                self._info = MasterInfo(**{**asdict(self._info), "elected_at": time.time()})
                self._zk.set_async(self._node, self._info.encode())
                self._on_change(True, "elected")
        return None

    def _on_state(self, state: str) -> None:
        # LOST: the session expired (a successor may lead). A SUSPENDED connection may still
        # come back with the session; the leader's lease covers that time.
        if state == KazooState.LOST:
            with self._lock:
                was, self._leading = self._leading, False
                self._spent = self._spent or was
            if was:
                self._on_change(False, f"ZooKeeper connection {state.lower()}")
