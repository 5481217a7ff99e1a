"""What the master counts as it works: offers and status updates (plain numbers, no I/O).

The core increments these where things happen; master/metrics.py exposes them as Prometheus
counters at scrape time, so the offer path pays one integer addition per event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MasterCounters"]


@dataclass
class MasterCounters:
    offers_sent: int = 0
    offers_accepted: int = 0
    offers_declined: int = 0
    # Every rescind, including those of offers held past --offer-timeout ...
    offers_rescinded: int = 0
    # ... which are also counted here.
    offers_timed_out: int = 0
    # Optimistic mode: offers rescinded because another framework took their resources first,
    # and Accepts refused as conflicts (OFFER_CONFLICT or BELOW_SHARE_PRIORITY).
    offers_conflicted: int = 0
    accepts_aborted: int = 0
    # Holds (Scheduler.Hold) that were met, and those that expired unmet.
    holds_met: int = 0
    holds_expired: int = 0
    tasks_launched: int = 0
    # Status updates from agents (each resend counts), updates sent on to frameworks (the
    # master's own too: LOST, reconciliation answers), acknowledgements sent on to agents.
    updates_received: int = 0
    updates_forwarded: int = 0
    updates_acknowledged: int = 0
    # Updates an agent sent for a task no framework launched there (acknowledged, dropped).
    updates_for_unknown_tasks: int = 0
    # New agents turned away while the master was behind (MASTER_BUSY), and how far behind it
    # is now: its tick loop's lateness and the wait of the agents' latest heartbeats.
    agents_refused_busy: int = 0
    loop_lag_seconds: float = 0.0
    intake_lag_seconds: float = 0.0
    # Seconds from resources becoming free on an agent (a task ending, a decline, an agent
    # joining) to the offer of them, per offer; a histogram in master/metrics.py.
    # (seconds, how many offers waited that long)
    observe_offer_latency: Callable[[float, int], None] = field(default=lambda seconds, n: None)
