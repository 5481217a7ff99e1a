"""A framework daemon run as a highly available set on ZooKeeper (`agora batch --zk`,
`agora services --zk`): two or three members, one leads, the others stand by, as Marathon,
Aurora and Chronos run.

The members do what the masters do (master/leadership.py), with the same parts:

- Each stands for election under `<path>/election` (common/election.py); the first in line
  leads. A standby's port answers every call with UNAVAILABLE / NOT_LEADER naming the leader
  (common/standby.py), so a client pointed at any member finds the leader; clients that find
  the API through the master are sent to the leader anyway, since only it subscribes.
- The state is the log under `<path>/state` (common/zk_log.py, written by
  frameworks/sdk/replication.py): every standby follows it (FOLLOW_SECONDS apart), so a new
  leader only reads the tail its predecessor wrote since, through the quorum, before it starts.
- Elected, a member renews a lease on ZooKeeper's answers (common/lease.py), fences its API
  with it (common/fence.py) and its log appends on its election znode, then starts the daemon
  on the same port: it subscribes with the framework id in the state, so the master fails the
  framework over to it (the old subscription, if any, is cut) and its tasks go on running.
- Deposed (the lease ran out, the session or the znode is gone, an append was fenced), the
  fence closes first, so the API answers nothing more and the state takes no write; then
  `on_deposed` runs: the `agora` command re-executes itself and stands by afresh, as a master
  does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from agora.common import new_id
from agora.common.election import (
    Contender,
    connect_leader_client,
    leader_to_name,
    list_masters,
    znode_exists,
)
from agora.common.fence import Fence
from agora.common.lease import DURATION_SHARE, Lease, LeaseKeeper
from agora.common.masters import MasterInfo, parse_masters
from agora.common.standby import StandbyServer
from agora.common.zk_log import ZkLog
from agora.frameworks.sdk.discovery import SET_LABEL
from agora.frameworks.sdk.replication import ReplicatedDatabase

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from agora.frameworks.sdk.daemon import FrameworkDaemon

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_SESSION_TIMEOUT", "FOLLOW_SECONDS", "DaemonLeadership"]

# As the masters' (master/leadership.py): a killed leader's session expires after this long,
# the lower bound on failover; a leader cut off from ZooKeeper stops acting after 0.8 of it.
DEFAULT_SESSION_TIMEOUT = 1.5
# How often a standby reads the state's new entries: what a new leader has left to read.
FOLLOW_SECONDS = 0.25


def parse_zk(text: str):
    """The MasterSet of a --zk value (zk://host:port[,host:port]/path); ValueError if not."""
    zk = parse_masters(text)
    if not zk.uses_zookeeper:
        raise ValueError(f"--zk {text!r}: write zk://HOST:PORT[,HOST:PORT]/PATH")
    return zk


class DaemonLeadership:
    """Runs `daemon` as one member of the set at `zk_url`. `on_deposed(reason)` is called, on
    whichever thread found out, once this member has stopped acting; by default the daemon is
    stopped (an embedding program may re-create it)."""

    def __init__(
        self,
        daemon: FrameworkDaemon,
        zk_url: str,
        *,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        on_deposed: Callable[[str], None] | None = None,
    ) -> None:
        self.daemon = daemon
        self.zk = parse_zk(zk_url)
        self.session_timeout = session_timeout
        self._on_deposed = on_deposed
        self.member_id = new_id(daemon.kind)
        self.elected = asyncio.Event()  # elected: the daemon is starting
        self.leading = asyncio.Event()  # the daemon serves (and subscribes)
        self.fence = Fence(
            Lease(session_timeout * DURATION_SHARE), self._stepped_down, what=self.what
        )
        self._zk: KazooClient | None = None
        self._contender: Contender | None = None
        self._standby: StandbyServer | None = None
        self._keeper: LeaseKeeper | None = None
        self._replica: ReplicatedDatabase | None = None
        self._following: asyncio.Task | None = None
        self._leader = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    @property
    def what(self) -> str:
        return f"the {self.daemon.kind} daemon"

    @property
    def address(self) -> str:
        """host:port this member advertises (in its election znode, and to clients)."""
        assert self.daemon.port is not None
        return self.daemon.service_address

    @property
    def leader(self) -> str:
        """host:port of the leading member, "" when none is known."""
        return self._leader

    async def start(self, on_waiting: Callable[[str], None] | None = None) -> None:
        """Binds the port as a standby, connects to ZooKeeper (trying for ever while it is
        unreachable, saying so through `on_waiting`), reads the state and stands for
        election; the daemon starts when this member is elected."""
        self._loop = asyncio.get_running_loop()
        config = self.daemon.config
        self._standby = StandbyServer(
            config.host, config.port, self.daemon.credentials, lambda: self._leader, self.what
        )
        self.daemon.port = config.port = await self._standby.start()
        self._zk = zk = await connect_leader_client(
            self.zk.zk_hosts, self.session_timeout, self._granted, on_waiting
        )
        zk.add_listener(self._on_zk_state)
        self._replica = ReplicatedDatabase(
            await asyncio.to_thread(ZkLog, zk, f"{self.zk.zk_path}/state")
        )
        await asyncio.to_thread(self._replica.catch_up, True)
        self._following = asyncio.create_task(self._follow(), name=f"{self.daemon.kind}-follow")
        info = MasterInfo(self.member_id, self.address, time.time())
        self._contender = Contender(zk, self.zk.zk_path, info, self._on_change)
        await asyncio.to_thread(self._contender.start)
        zk.ChildrenWatch(f"{self.zk.zk_path}/election", self._on_members)
        log.info(
            f"{self.daemon.kind} standing by",
            address=self.address,
            zk=str(self.zk),
            state_entry=self._replica.applied,
        )

    async def stop(self) -> None:
        """A clean shutdown: stop the daemon (its last commits land: the election znode is
        still ours), then withdraw (the next member leads at once) and stop serving."""
        self._stopping = True
        self.fence.lose("stopping")  # the API answers nothing more
        if self._keeper is not None:
            self._keeper.stop()
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._following
        if self.elected.is_set():
            await self.daemon.stop()
        if self._contender is not None:
            await asyncio.to_thread(self._contender.withdraw)
        if self._standby is not None:
            await self._standby.stop()
        if self._zk is not None:
            zk, self._zk = self._zk, None
            await asyncio.to_thread(_close, zk)

    async def _follow(self) -> None:
        """While standing by: apply the leader's new entries, so that a failover reads little."""
        assert self._replica is not None
        delay = FOLLOW_SECONDS
        while not self.elected.is_set():
            await asyncio.sleep(delay)
            try:
                await asyncio.to_thread(self._replica.catch_up)
                delay = FOLLOW_SECONDS
            except Exception as e:  # noqa: BLE001 - ZooKeeper away, or an entry that fails
                log.warning("the leader's state not followed; trying again", error=str(e))
                delay = min(5.0, delay * 2)

    # --- kazoo's thread -------------------------------------------------------------------

    def _granted(self, seconds: float) -> None:
        self.fence.lease.duration = seconds * DURATION_SHARE

    def _on_members(self, children: list[str]) -> None:
        try:
            members = list_masters(self._zk, self.zk.zk_path)
        except Exception:  # noqa: BLE001 - the connection dropped; the state listener acts
            return
        if self._contender is not None and self._contender.leading:
            return
        self._leader = leader_to_name(members, self.address, self.member_id)

    def _on_change(self, leading: bool, reason: str) -> None:
        if leading:
            self._leader = self.address
            assert self._loop is not None
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._lead()))
        else:
            self.fence.lose(reason)

    def _on_zk_state(self, state: str) -> None:
        from kazoo.client import KazooState

        if state == KazooState.LOST:
            self.fence.lose("ZooKeeper session lost")

    def _probe(self, timeout: float) -> bool | None:
        """The lease keeper's thread: whether our election znode still exists."""
        node = self._contender.node if self._contender is not None else None
        return znode_exists(self._zk, node, timeout)

    def _stepped_down(self, reason: str) -> None:
        # The fence is closed: the API answers nothing and the log takes no append.
        if self._stopping:
            return
        if self._keeper is not None:
            self._keeper.stop()
        log.warning("stepping down", reason=reason, member_id=self.member_id)
        if self._on_deposed is not None:
            self._on_deposed(reason)
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.stop()))

    # --- the event loop -------------------------------------------------------------------

    async def _lead(self) -> None:
        try:
            await self._start_leading()
        except Exception as e:  # noqa: BLE001 - any failure: let another member lead
            log.exception("could not start leading")
            self.fence.lose(f"could not start leading: {e}")

    async def _start_leading(self) -> None:
        if self.fence.lost or self.elected.is_set():
            return
        assert self._standby is not None and self._contender is not None
        assert self._replica is not None
        started = time.monotonic()
        self._keeper = LeaseKeeper(self.fence.lease, self._probe, self.fence.lose)
        if not await asyncio.to_thread(self._keeper.renew_now):
            self.fence.lose("elected, but ZooKeeper did not confirm it in time")
            return
        self._keeper.start()
        self.elected.set()
        if self._following is not None:
            # A catch-up under way finishes in its thread; ours below waits for it (a lock).
            self._following.cancel()
        # Appends are fenced from here on; the sync makes this read see every entry the
        # previous leader could land (its appends fail once its znode is gone).
        self._replica.log.fence = self._contender.node
        self._replica.log.on_fenced = lambda: self.fence.lose(
            "the state log refused an append: no longer the leader"
        )
        self._replica.log.on_uncertain = self.fence.lose  # the log is the truth: start again
        tail = await asyncio.to_thread(self._replica.catch_up, True)
        await self._standby.stop()
        self.daemon.replica = self._replica
        self.daemon.fence = self.fence
        self.daemon.labels[SET_LABEL] = str(self.zk)
        await self.daemon.start()
        self.leading.set()
        log.info(
            f"{self.daemon.kind} leading",
            address=self.address,
            member_id=self.member_id,
            state_entries_read=tail,
            took_seconds=round(time.monotonic() - started, 3),
        )


def _close(zk) -> None:
    zk.stop()
    zk.close()
