"""Who may do what, as every daemon decides it: the actions, a decision, and the Authorizer
protocol with its permissive default. The master (master/authz.py: its Gatekeeper), the agents
(their file API) and the framework daemons all decide through this vocabulary; an ACL file
(common/acls.py) is one Authorizer. Pure: no grpc, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["EXPLICIT_ONLY", "Action", "AllowAll", "Authorizer", "Decision", "refusal_message"]


class Action(enum.StrEnum):
    """What a caller asks to do; the object it names is given with it (see each)."""

    REGISTER_AGENT = "register_agent"  # object: the agent id ("" for a new agent)
    REGISTER_FRAMEWORK = "register_framework"  # object: the role
    # object: the framework's name. Allowed unless the name is reserved for other principals
    # (register_frameworks rules with names:), so clients that find a framework's API by its
    # name (`agora job`, `agora app`) reach the daemon that name was reserved for.
    USE_FRAMEWORK_NAME = "use_framework_name"
    RUN_AS_USER = "run_as_user"  # object: the Unix user
    KILL_TASKS = "kill_tasks"  # object: the framework id whose tasks
    TEARDOWN_FRAMEWORK = "teardown_framework"  # object: the framework id
    READ_SANDBOX = "read_sandbox"  # object: the framework id whose sandboxes
    SET_WEIGHT = "set_weight"  # object: the role
    SET_QUOTA = "set_quota"  # object: the role
    DRAIN_AGENT = "drain_agent"  # object: the agent id
    READ_STATE = "read_state"  # object: "" (the whole cluster)
    READ_METRICS = "read_metrics"  # object: "" (a daemon's /metrics)
    # Checked by the framework daemons (agora batch, agora services) on their own APIs:
    SUBMIT_JOB = "submit_jobs_in_role"  # object: the role the job's tasks run in
    MANAGE_APP = "manage_apps_in_role"  # object: the role of an app made, changed or deleted
    RELAY_AGENTS = "relay_agents"  # object: "" (speak for the agents that dial a relay)


# Actions no default allows: only a rule naming the principal does. Relaying agents is speaking
# for other principals (the relay names who each agent is), so it is never implied.
EXPLICIT_ONLY = frozenset({Action.RELAY_AGENTS})


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""  # why not, for the refusal and the log


class Authorizer(Protocol):
    def authorize(self, principal: str, action: Action, obj: str) -> Decision: ...


class AllowAll:
    """Everything is allowed (no --acls)."""

    def authorize(self, principal: str, action: Action, obj: str) -> Decision:
        if action in EXPLICIT_ONLY:
            return Decision(False, f"it needs a {action.value} rule in the master's --acls file")
        return Decision(True)


def refusal_message(principal: str, action: Action, obj: str, decision: Decision) -> str:
    """What a refused caller is told: who, what, to what, and why."""
    who = principal or "an anonymous caller"
    why = f": {decision.reason}" if decision.reason else ""
    return f"{who} may not {action.value.replace('_', ' ')} {obj!r}{why}"
