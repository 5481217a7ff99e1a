"""Whether the master takes a new agent now, or tells it when to come back.

A master that is behind on its own work (its tick loop runs late) and keeps admitting agents
digs itself deeper: each registration costs more work (reconciliation, the allocator, an
offer), and the heartbeats of the agents already in wait behind it. So while it is behind by
more than BUSY_LAG it turns new agents away with MASTER_BUSY and a time to come back, longer
the further behind it is; agents add jitter, so the wave spreads out instead of returning at
once. Agents it knows (re-registering with their tasks) are always taken. Pure.
"""

from __future__ import annotations

__all__ = ["BUSY_LAG", "refusal_delay"]

# Seconds behind (its tick loop's lateness) beyond which new agents are turned away. Measured
# with `agora experiment scale --agents 20000` on 2 cores: 0.25 s turned agents away so often
# that registering took 160 s; 1 s, 51-106 s with 0-4 agents removed; none, 174 removed and
# the run failed. The intake lag is not used here: it includes the agents' own send queues.
BUSY_LAG = 1.0
# Bounds of the time given to come back, in seconds.
MIN_RETRY, MAX_RETRY = 1.0, 15.0


def refusal_delay(behind: float) -> float | None:
    """None to admit; else the seconds after which a new agent should try again."""
    if behind <= BUSY_LAG:
        return None
    return min(MAX_RETRY, max(MIN_RETRY, round(4 * behind, 2)))
