"""Following a framework daemon's highly available set (`agora batch --zk`, `agora services
--zk`) from the command line: a standby names the leader, and while the set fails over (the
master still names the leader that died, or a standby knows no leader yet) a call is retried
for up to FAILOVER_WAIT seconds instead of failing."""

from __future__ import annotations

import time

# A killed leader is replaced within its ZooKeeper session timeout (1.5 s by default) plus
# its start; this covers that with room to spare on a loaded machine.
FAILOVER_WAIT = 10.0
FAILOVER_POLL = 0.25


def reads_only(method: str) -> bool:
    """Whether an API method only reads (Get..., List..., Watch...): it may be sent again
    whatever became of the first try."""
    return method.startswith(("Get", "List", "Watch"))


def never_ran(error) -> bool:
    """Whether a failed call provably did nothing: a standby refused it unread, or the
    connection was never made."""
    from agora.common.errors import error_metadata

    if error_metadata(error).get("standby") == "yes":
        return True
    details = (error.details() or "").lower()
    return "connection refused" in details or "failed to connect" in details


def next_try(
    error,
    address: str,
    *,
    given: bool,
    in_set: bool,
    deadline: float,
    method: str = "Get",
) -> str | None:
    """Where to try a failed call again: an address (a standby named the leader), "" (find
    the API through the master again, after a short pause), or None (the error stands).
    `given`: the address came from the command line; `in_set`: the master said the daemon is
    one of a set. A call that changes something (`method`) is sent again only if the first try
    provably did nothing (a leader that stepped down after doing it refuses the answer too:
    sending it again could submit a job twice)."""
    import grpc

    from agora.common.errors import Reason, error_metadata, reason_of

    if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
        return None
    if not reads_only(method) and not never_ran(error):
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
