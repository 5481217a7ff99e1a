"""Following a framework daemon's highly available set (`agora batch --zk`, `agora services
--zk`) from the command line: a standby names the leader, and while the set fails over (the
master still names the leader that died, or a standby knows no leader yet) a call is retried
for up to FAILOVER_WAIT seconds instead of failing."""

from __future__ import annotations

import time

# A killed leader is replaced within its ZooKeeper session timeout (1.5 s by default) plus
# its start; this covers that with room to spare.
FAILOVER_WAIT = 5.0
FAILOVER_POLL = 0.25


def next_try(error, address: str, *, given: bool, in_set: bool, deadline: float) -> str | None:
    """Where to try a failed call again: an address (a standby named the leader), "" (find
    the API through the master again, after a short pause), or None (the error stands).
    `given`: the address came from the command line; `in_set`: the master said the daemon is
    one of a set."""
    import grpc

    from agora.common.errors import Reason, error_metadata, reason_of

    if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
        return None
    if reason_of(error) == Reason.NOT_LEADER:
        leader = error_metadata(error).get("leader", "")
        if leader and leader != address:
            return leader
        time.sleep(FAILOVER_POLL)  # being elected: ask again in a moment
        return address if given else ""
    if given or not in_set:
        return None
    time.sleep(FAILOVER_POLL)  # refused where the master said: the new leader subscribes soon
    return ""
