"""Whether the master takes a new agent now, or tells it when to come back.

A master that is behind on its own work (its tick loop runs late) and keeps admitting agents
digs itself deeper: each registration costs more work (reconciliation, the allocator, an
offer), and the heartbeats of the agents already in wait behind it. So while it is behind by
more than BUSY_LAG it turns new agents away with MASTER_BUSY and a time to come back, longer
the further behind it is; agents add jitter, so the wave spreads out instead of returning at
once. Agents it knows (re-registering with their tasks) are always taken. Pure.
"""

from __future__ import annotations

__all__ = ["BUSY_LAG", "retry_after"]

# Seconds behind beyond which new agents are turned away.
BUSY_LAG = 0.25
# Bounds of the time given to come back, in seconds.
MIN_RETRY, MAX_RETRY = 1.0, 15.0


def retry_after(behind: float) -> float | None:
    """None to admit; else the seconds after which a new agent should try again."""
    if behind <= BUSY_LAG:
        return None
    return min(MAX_RETRY, max(MIN_RETRY, round(4 * behind, 2)))
