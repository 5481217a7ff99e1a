"""Leader election on a real ZooKeeper: the first contender leads, the next one follows it."""

from __future__ import annotations

import queue
import time
import uuid

import pytest

from agora.common.election import Contender, MasterInfo, find_leader, list_masters, zk_client


@pytest.fixture
def path():
    return f"/agora-test-{uuid.uuid4().hex[:8]}"


def started(zookeeper, timeout: float = 2.0):
    client = zk_client(zookeeper.address, session_timeout=timeout)
    client.start(timeout=10)
    return client


def done(client) -> None:
    client.stop()
    client.close()  # kazoo's wake-up socket pair is only closed here


def contender(client, path, name: str) -> tuple[Contender, queue.Queue]:
    changes: queue.Queue = queue.Queue()
    info = MasterInfo(master_id=name, address=f"{name}:5050", started_at=time.time())
    c = Contender(client, path, info, lambda leading, why: changes.put((leading, why)))
    c.start()
    return c, changes


def test_the_first_leads_and_the_next_takes_over_when_it_withdraws(zookeeper, path):
    a_zk, b_zk, reader = started(zookeeper), started(zookeeper), started(zookeeper)
    try:
        a, a_changes = contender(a_zk, path, "m1")
        assert a_changes.get(timeout=5) == (True, "elected")
        b, b_changes = contender(b_zk, path, "m2")
        leader = find_leader(reader, path)
        assert leader is not None and leader.master_id == "m1" and leader.elected_at > 0
        assert [m.master_id for m in list_masters(reader, path)] == ["m1", "m2"]
        assert b_changes.empty() and not b.leading
        a.withdraw()
        assert b_changes.get(timeout=5) == (True, "elected")
        assert find_leader(reader, path).address == "m2:5050"
    finally:
        for client in (a_zk, b_zk, reader):
            done(client)


def test_a_leader_whose_session_dies_is_replaced_after_the_session_timeout(zookeeper, path):
    a_zk, b_zk = started(zookeeper, timeout=1.0), started(zookeeper)
    try:
        a, a_changes = contender(a_zk, path, "m1")
        assert a_changes.get(timeout=5)[0] is True
        b, b_changes = contender(b_zk, path, "m2")
        a_zk.stop()  # the connection closes: the leader must stop acting at once
        assert a_changes.get(timeout=5) == (False, "ZooKeeper connection lost")
        assert b_changes.get(timeout=10) == (True, "elected")
    finally:
        done(a_zk)
        done(b_zk)


def test_a_suspended_connection_is_left_to_the_lease_not_reported_as_a_deposition(tmp_path, path):
    """A ZooKeeper server restarting suspends the connection; the session may well survive it
    (an ensemble's other servers take it over): the contender keeps leading, and the leader's
    lease (common/lease.py) decides whether the master may act meanwhile."""
    from kazoo.client import KazooState

    from agora.common.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk").start()
    zk = started(server, timeout=4.0)
    states: list[str] = []
    zk.add_listener(states.append)
    try:
        a, changes = contender(zk, path, "m1")
        assert changes.get(timeout=5)[0] is True
        server.stop(kill=True)
        deadline = time.monotonic() + 10
        while KazooState.SUSPENDED not in states and time.monotonic() < deadline:
            time.sleep(0.05)
        assert KazooState.SUSPENDED in states
        assert changes.empty() and a.leading
    finally:
        done(zk)
        server.stop()


def test_each_election_has_a_higher_epoch_than_the_one_before(zookeeper, path):
    a_zk, b_zk, reader = started(zookeeper), started(zookeeper), started(zookeeper)
    try:
        a, a_changes = contender(a_zk, path, "m1")
        assert a_changes.get(timeout=5)[0] is True
        b, b_changes = contender(b_zk, path, "m2")
        first = find_leader(reader, path).epoch
        assert first == a.epoch > 0
        a.withdraw()
        assert b_changes.get(timeout=5)[0] is True
        assert find_leader(reader, path).epoch == b.epoch > first
    finally:
        for client in (a_zk, b_zk, reader):
            done(client)


async def test_a_master_that_cannot_start_leading_steps_down():
    """Holding the leadership while serving nothing would stop every other master from
    taking over: a failure to start leading deposes (agora master then re-executes itself)."""
    from agora.common.masters import parse_masters
    from agora.master.config import MasterConfig
    from agora.master.leadership import Leadership

    deposed = []
    leadership = Leadership(
        MasterConfig(port=0), parse_masters("zk://127.0.0.1:1/x"), on_deposed=deposed.append
    )

    async def fail():
        raise OSError("port 5050 is taken")

    leadership._start_leading = fail
    await leadership._lead()
    assert deposed == ["could not start leading: port 5050 is taken"]


def test_the_session_timeout_zookeeper_grants_is_what_a_leader_sizes_its_lease_on(zookeeper):
    """kazoo remembers the timeout it asked for; ZooKeeper clamps it into its bounds (20 s at
    most here). A lease sized on a 30 s request would outlive the 20 s session."""
    from agora.common.election import on_granted_timeout

    granted: list[float] = []
    client = zk_client(zookeeper.address, session_timeout=30.0)
    on_granted_timeout(client, granted.append)
    client.start(timeout=10)
    try:
        assert granted == [20.0]
    finally:
        done(client)
