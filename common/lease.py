"""The leader's lease: how long a master elected on ZooKeeper may act without hearing from it.

ZooKeeper expires a session only after it has heard nothing from its client for the session
timeout. So when the leader sends a request at `sent` (monotonic clock) and ZooKeeper answers
that the leader's election znode still exists, the session cannot expire, and no successor be
elected, before `sent + session timeout`. The lease runs to `sent + duration`, with `duration`
a fraction of the timeout (DURATION_SHARE) as a margin for ZooKeeper's tick-sized expiry
buckets and for the time a successor would need to be told anyway.

The lease is renewed only by ZooKeeper's answers and checked on a monotonic clock that keeps
counting while the process is paused (SIGSTOP, a VM freeze, a long GC-like stall): a
leader resumed after its session expired finds its lease over before it can do anything, even
if its ZooKeeper client has not yet noticed the connection is gone (issue 38). For the same
reason a leader whose connection is only suspended (a ZooKeeper server restarting, a rolling
restart of an ensemble) keeps leading as long as it renews in time, and steps down when it
cannot.

`Lease` is pure; `LeaseKeeper` is the thread that renews it with a probe given by the caller
(master/leadership.py asks ZooKeeper, through the quorum, whether the znode still exists).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

__all__ = ["DURATION_SHARE", "PROBES_PER_LEASE", "Lease", "LeaseKeeper", "lease_clock"]

# The lease as a share of the negotiated session timeout. The session cannot expire before
# `sent + timeout` (ZooKeeper rounds expiry up to its next tick, and a follower forwards a
# client's activity to the quorum's leader later, never earlier); the 20% left over covers
# what a successor could not do in less anyway (see the expiry, be told, start leading) and
# the time between a fence check and the write it allows. More would cost riding out
# ZooKeeper's own elections: a three-server ensemble restarting its leader answered nothing
# for 0.8-1.1 s on this machine (tick 200 ms).
DURATION_SHARE = 0.8
# Probes per lease: one lost or slow answer costs a sixth of the lease, not all of it.
PROBES_PER_LEASE = 6


class Lease:
    """Until when this master may act as leader (monotonic seconds). Pure."""

    __slots__ = ("duration", "expires_at")

    def __init__(self, duration: float) -> None:
        if duration <= 0:
            raise ValueError("a lease lasts a positive time")
        self.duration = duration
        self.expires_at = -math.inf

    def renew(self, sent_at: float) -> None:
        """ZooKeeper answered a probe sent at `sent_at`: the lease runs from then. An answer to
        an older probe, arriving late, never shortens it."""
        self.expires_at = max(self.expires_at, sent_at + self.duration)

    def holds(self, now: float) -> bool:
        return now < self.expires_at

    def remaining(self, now: float) -> float:
        return max(0.0, self.expires_at - now)


def lease_clock() -> float:
    """Seconds on CLOCK_BOOTTIME: monotonic, and, unlike CLOCK_MONOTONIC, counting while the
    machine is suspended (a laptop asleep, a VM saved and restored): a leader resumed from
    either finds its lease over. The lease keeper and the fence read this same clock."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# What a probe says: True, the znode is there (the session is alive); False, it is gone (the
# session expired: a successor may lead); None, no answer (the connection is suspended).
Probe = Callable[[float], "bool | None"]


class LeaseKeeper:
    """Renews `lease` with `probe(timeout)` every duration / PROBES_PER_LEASE seconds, on a
    thread of its own; calls `on_lost(reason)` once, from that thread, when the znode is gone
    or the lease ran out unrenewed, and then stops."""

    def __init__(
        self,
        lease: Lease,
        probe: Probe,
        on_lost: Callable[[str], None],
        clock: Callable[[], float] = lease_clock,
    ) -> None:
        self.lease = lease
        self._probe = probe
        self._on_lost = on_lost
        self._clock = clock
        self.interval = lease.duration / PROBES_PER_LEASE
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def renew_now(self) -> bool:
        """One probe, here (before starting to lead): True when the lease was renewed."""
        sent = self._clock()
        held = self._ask(sent, self.lease.duration)
        if held:
            self.lease.renew(sent)
        return bool(held)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._keep, name="leader-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _ask(self, sent: float, timeout: float) -> bool | None:
        try:
            return self._probe(max(0.01, timeout))
        except Exception as e:  # noqa: BLE001 - no answer: the lease decides
            log.debug("leader lease probe failed", error=repr(e))
            return None

    def _keep(self) -> None:
        while not self._stopped.is_set():
            sent = self._clock()
            # Wait for an answer at most until the lease would run out (at least one interval).
            held = self._ask(sent, max(self.interval, self.lease.remaining(sent)))
            if self._stopped.is_set():
                return
            if held is False:
                self._lost("the election znode is gone (the ZooKeeper session expired)")
                return
            if held:
                self.lease.renew(sent)
            now = self._clock()
            if not self.lease.holds(now):
                self._lost(
                    f"no answer from ZooKeeper for the whole leader lease "
                    f"({self.lease.duration:.2f} s)"
                )
                return
            self._stopped.wait(max(0.0, sent + self.interval - now))

    def _lost(self, reason: str) -> None:
        self._stopped.set()
        self._on_lost(reason)
