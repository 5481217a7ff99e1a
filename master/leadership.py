"""A master in a set coordinated by ZooKeeper (--zk): stand by, lead when elected, step down.

While standing by, the master's port answers every call with UNAVAILABLE and the reason
NOT_LEADER, naming the leader in the error's metadata, so that a client pointed at any master
finds the leader at once. When elected it stops that stand-in server and starts the real Master
on the same port, with its registry in ZooKeeper (master/zk_store.py), so it starts exactly where
the previous leader stopped: agents and frameworks re-register with their ids and tasks.

Stepping down is immediate and total. A leader acts only while its lease holds
(common/lease.py): renewed by ZooKeeper's answers, on the monotonic clock, shorter than the
session. Every call to the leader passes its fence (common/fence.py), which closes when the lease
runs out, when the session is lost or the election znode is gone, or when a registry write is
refused. The fence closes first, so nothing more is answered or sent; then `on_deposed` runs:
`agora master` re-executes itself there (master_cmd.restart_self), and every stream, offer and
timer of the old leader vanishes with the process image; the new process stands by again.
That is Mesos' behaviour (its master exits and is restarted by a supervisor), without needing
the supervisor. A suspended connection alone is not a reason to step down: a leader rides out a
ZooKeeper server's restart (and a rolling restart of an ensemble) if it renews its lease in
time. The registry's writes are fenced on the election znode as well.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import structlog
from kazoo.client import KazooClient, KazooState

from agora.common import new_id
from agora.common.election import (
    ELECTION,
    Contender,
    connect_leader_client,
    leader_to_name,
    list_masters,
    znode_exists,
)
from agora.common.fence import Fence
from agora.common.lease import DURATION_SHARE, Lease, LeaseKeeper
from agora.common.masters import MasterInfo, MasterSet
from agora.common.standby import StandbyServer
from agora.master.config import MasterConfig
from agora.master.server import Master

log = structlog.get_logger(__name__)

__all__ = ["DEFAULT_SESSION_TIMEOUT", "Leadership"]

# Seconds. The lower bound on failover after a leader dies without a word (kill -9, power
# loss): its znode goes only when ZooKeeper expires its session. Mesos defaults to 10 s; 1.5 s
# brings everything back within about 1.6 s of a SIGKILL (agora experiment failover). A leader
# cut off from ZooKeeper steps down when its lease runs out, at most 1.2 s (0.8 of it) after the
# last answer, before its session can expire. On a network with slow or distant ZooKeeper
# servers choose more: a longer timeout only delays failover, it never risks two leaders.
DEFAULT_SESSION_TIMEOUT = 1.5


class Leadership:
    """Runs one master of a set: stands for election under `masters.zk_path`, stands by, leads.

    `on_deposed(reason)` is called, on whichever thread found out (kazoo's, the lease keeper's
    or the event loop's), once this master has stopped acting (see the module's docstring);
    `agora master` re-executes itself there."""

    def __init__(
        self,
        config: MasterConfig,
        masters: MasterSet,
        *,
        advertise_ip: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        on_deposed: Callable[[str], None],
    ) -> None:
        if not masters.uses_zookeeper:
            raise ValueError("leadership needs a zk:// master set")
        self.config = config
        self.masters = masters
        self.advertise_ip = advertise_ip
        self.session_timeout = session_timeout
        self._on_deposed = on_deposed
        self.master_id = new_id("master")
        self.master: Master | None = None  # the Master, once elected
        self.elected = asyncio.Event()
        self._zk: KazooClient | None = None
        self._contender: Contender | None = None
        self._standby: StandbyServer | None = None
        self._leader = ""  # host:port of the current leader, "" when none
        self._members: list[MasterInfo] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        # Closed once this master may no longer act (stepping down or stopping); the lease is
        # sized once ZooKeeper has granted the session's timeout.
        self.fence = Fence(Lease(session_timeout * DURATION_SHARE), self._stepped_down)
        self._session_granted = 0.0  # seconds, as ZooKeeper granted at the last connection
        self._keeper: LeaseKeeper | None = None
        self._elected_at = 0.0

    @property
    def address(self) -> str:
        """host:port this master advertises (in its election znode)."""
        assert self._standby is not None
        host = self.advertise_ip or self.config.host
        return f"{host}:{self._standby.address.rpartition(':')[2]}"

    @property
    def leader(self) -> str:
        return self._leader

    def _other_leader(self) -> str:
        """The leader to send callers to ("" when none is elected). This master itself when it
        is elected and still starting to lead: callers retry it in a moment."""
        return self._leader

    def members(self) -> list[MasterInfo]:
        """Every master standing, the leader first (as last seen from ZooKeeper; this master's
        own election time from itself, since the watch sees only who stands, not updates)."""
        return [
            replace(m, elected_at=self._elected_at)
            if m.master_id == self.master_id and self._elected_at
            else m
            for m in self._members
        ]

    async def start(
        self,
        on_waiting: Callable[[str], None] | None = None,
        on_listening: Callable[[], None] | None = None,
    ) -> None:
        """Binds the port as a standby (then calls `on_listening`), connects to ZooKeeper
        (saying so through `on_waiting`, and trying for ever, while it is unreachable) and
        stands for election."""
        self._loop = asyncio.get_running_loop()
        self._standby = StandbyServer(
            self.config.host, self.config.port, self.config.credentials, self._other_leader
        )
        port = await self._standby.start()
        self.config.port = port
        if on_listening is not None:
            on_listening()
        self._zk = zk = await connect_leader_client(
            self.masters.zk_hosts, self.session_timeout, self._granted, on_waiting
        )
        log.info(
            "connected to ZooKeeper",
            zk=str(self.masters),
            session_timeout=self._session_granted,
            lease=round(self.fence.lease.duration, 3),
        )
        zk.add_listener(self._on_zk_state)
        # No core (and no clock) yet: the election says when this process started standing.
        info = MasterInfo(self.master_id, self.address, time.time())
        self._contender = Contender(zk, self.masters.zk_path, info, self._on_change)
        await asyncio.to_thread(self._contender.start)
        zk.ChildrenWatch(f"{self.masters.zk_path}/{ELECTION}", self._on_members)

    async def stop(self) -> None:
        """A clean shutdown: withdraw (the next master leads at once), stop serving."""
        # Closing the client reports the session LOST: that is us leaving, not a deposition.
        self._stopping = True
        self.fence.lose("stopping")
        if self._keeper is not None:
            self._keeper.stop()
        if self._contender is not None:
            await asyncio.to_thread(self._contender.withdraw)
        if self.master is not None:
            await self.master.stop()
        if self._standby is not None:
            await self._standby.stop()
        if self._zk is not None:
            zk, self._zk = self._zk, None
            await asyncio.to_thread(_close, zk)

    # --- kazoo's thread -------------------------------------------------------------------

    def _on_members(self, children: list[str]) -> None:
        try:
            members = list_masters(self._zk, self.masters.zk_path)
        except Exception:  # noqa: BLE001 - the connection dropped; the state listener acts
            return
        self._members = members
        if self._contender is not None and self._contender.leading:
            return  # elected: the standby names no one else
        self._leader = leader_to_name(members, self.address, self.master_id)

    def _on_change(self, leading: bool, reason: str) -> None:
        if leading:
            # From now on the standby says "starting to lead" rather than naming the previous
            # leader (whose znode may still be in the watch's last view).
            self._leader = self.address
            assert self._loop is not None
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._lead()))
        else:
            self._depose(reason)

    def _on_zk_state(self, state: str) -> None:
        # A standby whose session is lost is out of the election for good (its znode is gone):
        # it starts afresh too. (A leader's suspension is the Contender's to report.)
        if state == KazooState.LOST:
            self._depose("ZooKeeper session lost")

    def _granted(self, seconds: float) -> None:
        """kazoo's thread, at each connection: the lease is a share of the session ZooKeeper
        granted, which may differ from the one asked for (a server clamps it into its own
        bounds: with a lower maximum, a lease sized on the request would outlive the
        session)."""
        self._session_granted = seconds
        self.fence.lease.duration = seconds * DURATION_SHARE

    def _depose(self, reason: str) -> None:
        """Any thread: stop acting at once (the fence closes before anything else happens)."""
        self.fence.lose(reason)

    def _stepped_down(self, reason: str) -> None:
        # The fence is closed already: nothing is answered or sent from here on.
        if self._stopping:
            return
        if self._keeper is not None:
            self._keeper.stop()
        log.warning("stepping down", reason=reason, master_id=self.master_id)
        self._on_deposed(reason)

    def _probe(self, timeout: float) -> bool | None:
        """The lease keeper's thread: whether this master's election znode still exists."""
        node = self._contender.node if self._contender is not None else None
        return znode_exists(self._zk, node, timeout)

    # --- the event loop -------------------------------------------------------------------

    async def _lead(self) -> None:
        """Starts leading; a master that cannot (its port taken, ZooKeeper failing) steps down
        rather than hold the leadership while serving nothing."""
        try:
            await self._start_leading()
        except Exception as e:  # noqa: BLE001 - any failure: let another master lead
            log.exception("could not start leading")
            self._depose(f"could not start leading: {e}")

    async def _start_leading(self) -> None:
        if self.fence.lost or self.master is not None:
            return
        from agora.master.event_store import ZkEventStore
        from agora.master.zk_store import ZkRegistryStore

        assert self._standby is not None and self._contender is not None
        # Real time: the Master, and its core's clock, do not exist until below.
        started = time.monotonic()
        self._elected_at = time.time()
        self._keeper = LeaseKeeper(self.fence.lease, self._probe, self._depose)
        if not await asyncio.to_thread(self._keeper.renew_now):
            self._depose("elected, but ZooKeeper did not confirm it in time")
            return
        self._keeper.start()
        store = await asyncio.to_thread(
            ZkRegistryStore,
            self._zk,
            self.masters.zk_path,
            self._contender.node,
            lambda: self._depose("the registry refused a write: no longer the leader"),
        )
        # The cluster events, numbered on from the last one the previous leader landed.
        events = await asyncio.to_thread(
            ZkEventStore, self._zk, self.masters.zk_path, self._contender.node
        )
        await asyncio.to_thread(events.load)
        await self._standby.stop()
        self.master = master = Master(
            self.config,
            store=store,
            master_id=self.master_id,
            masters=self.members,
            fence=self.fence,
            epoch=self._contender.epoch,
            event_store=events,
        )
        await master.start()
        log.info(
            "leading",
            address=self.address,
            master_id=self.master_id,
            took_seconds=round(time.monotonic() - started, 3),  # real time, as `started`
        )
        self.elected.set()


def _close(zk) -> None:
    zk.stop()
    zk.close()
