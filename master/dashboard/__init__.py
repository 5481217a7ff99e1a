"""The master's web dashboard: lists and pages of agents, frameworks, tasks, offers, roles, jobs
and apps, and an operator's actions on them (kill, drain, scale; hold, release, requeue, update
or kill a job; suspend, resume or delete a schedule; an owner's weight) under the master's ACLs.

Served on the master's HTTP layer (agora.common.http, `--http-port`) from the same state the
Operator service reads (`ClusterView`, built on master.views), never a second copy. Plain HTML,
CSS and JavaScript in static/, committed, no build step and nothing fetched from elsewhere.
"""

from agora.master.dashboard.app import ClusterView, Dashboard
from agora.master.dashboard.history import ShareHistory

__all__ = ["ClusterView", "Dashboard", "ShareHistory"]
