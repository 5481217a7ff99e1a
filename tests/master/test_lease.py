"""The leader's lease and fence (issue 38): pure logic with a hand-driven clock, and the
keeper's thread with a probe that answers as told."""

from __future__ import annotations

import queue
import threading

import grpc
import pytest

from agora.common.errors import Reason
from agora.common.fence import Fence
from agora.common.lease import Lease, LeaseKeeper


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_runs_from_when_the_answered_probe_was_sent_not_when_it_came_back():
    lease = Lease(1.0)
    assert not lease.holds(0.0)  # never renewed: a master elected acts only once confirmed
    lease.renew(sent_at=10.0)
    assert lease.holds(10.9) and not lease.holds(11.0)
    lease.renew(sent_at=9.5)  # a late answer to an older probe never shortens it
    assert lease.expires_at == 11.0
    assert lease.remaining(10.75) == pytest.approx(0.25) and lease.remaining(12.0) == 0.0
    with pytest.raises(ValueError):
        Lease(0.0)


def test_the_fence_closes_when_the_lease_runs_out_even_after_a_pause_and_steps_down_once():
    clock, lost = Clock(), []
    fence = Fence(Lease(1.0), lost.append, clock=clock)
    fence.lease.renew(clock.now)
    assert fence.holds()
    clock.now += 5.0  # SIGSTOP for 5 s: the monotonic clock kept counting
    assert not fence.holds() and not fence.holds()
    assert lost == ["the leader lease ran out (1.00 s without ZooKeeper)"]
    fence.lease.renew(clock.now)  # an answer that raced the step-down does not reopen it
    assert not fence.holds() and len(lost) == 1
    status = fence.refusal("10.0.0.1:5050")
    assert status.code == grpc.StatusCode.UNAVAILABLE and "no longer leads" in status.details
    assert Reason.NOT_LEADER in str(status.trailing_metadata)


class Probe:
    """Answers the keeper's probes from a queue of answers (True, False, None or an error)."""

    def __init__(self, *answers) -> None:
        self.answers: queue.Queue = queue.Queue()
        for a in answers:
            self.answers.put(a)
        self.calls = 0

    def __call__(self, timeout: float):
        self.calls += 1
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            return None  # no answer in time, as when the connection is suspended
        if isinstance(answer, Exception):
            raise answer
        return answer


def keep(probe: Probe, duration: float = 0.4) -> tuple[LeaseKeeper, queue.Queue]:
    lost: queue.Queue = queue.Queue()
    keeper = LeaseKeeper(Lease(duration), probe, lost.put)
    return keeper, lost


def test_the_keeper_steps_down_when_the_election_znode_is_gone():
    probe = Probe(True, True, False)
    keeper, lost = keep(probe)
    assert keeper.renew_now()
    keeper.start()
    assert lost.get(timeout=10) == "the election znode is gone (the ZooKeeper session expired)"


def test_the_keeper_rides_out_failed_probes_while_the_lease_lasts_and_then_steps_down():
    # Two probes fail (a ZooKeeper server restarting) then answers come back: no step-down.
    probe = Probe(True, ConnectionError("connection loss"), None, *[True] * 200)
    keeper, lost = keep(probe, duration=2.0)
    assert keeper.renew_now()
    keeper.start()
    while probe.calls < 8:
        assert lost.empty()
        threading.Event().wait(0.05)
    assert lost.empty() and keeper.lease.holds(keeper._clock())
    # Then ZooKeeper stops answering altogether: the lease runs out and the keeper says so.
    while not probe.answers.empty():
        probe.answers.get_nowait()
    reason = lost.get(timeout=10)
    assert reason == "no answer from ZooKeeper for the whole leader lease (2.00 s)"
    keeper.stop()


def test_a_master_never_confirmed_by_zookeeper_does_not_start_leading():
    keeper, _ = keep(Probe(), duration=0.2)
    assert not keeper.renew_now() and not keeper.lease.holds(keeper._clock())
