"""Who may do what: every authorization decision of the master is made here, by one Authorizer.

The services ask `check(authorizer, principal, action, obj)` before acting; the principal is the
caller's certificate name (agora.common.credentials.caller_principal, "" without TLS). The
default, `AllowAll`, allows everything, as Agora did before ACLs; an ACL file (`--acls`) gives a
rule-based Authorizer behind the same protocol. Pure: no grpc, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import grpc

from agora.master.errors import CallError, Reason

__all__ = ["EXPLICIT_ONLY", "Action", "AllowAll", "Authorizer", "Decision", "Gatekeeper", "check"]


class Action(enum.StrEnum):
    """What a caller asks to do; the object it names is given with it (see each)."""

    REGISTER_AGENT = "register_agent"  # object: the agent id ("" for a new agent)
    REGISTER_FRAMEWORK = "register_framework"  # object: the role
    RUN_AS_USER = "run_as_user"  # object: the Unix user
    KILL_TASKS = "kill_tasks"  # object: the framework id whose tasks
    TEARDOWN_FRAMEWORK = "teardown_framework"  # object: the framework id
    READ_SANDBOX = "read_sandbox"  # object: the framework id whose sandboxes
    SET_WEIGHT = "set_weight"  # object: the role
    SET_QUOTA = "set_quota"  # object: the role
    DRAIN_AGENT = "drain_agent"  # object: the agent id
    READ_STATE = "read_state"  # object: "" (the whole cluster)
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


def check(authorizer: Authorizer, principal: str, action: Action, obj: str) -> None:
    """Raises CallError(PERMISSION_DENIED) naming the principal, the action and the object."""
    decision = authorizer.authorize(principal, action, obj)
    if not decision.allowed:
        who = principal or "an anonymous caller"
        why = f": {decision.reason}" if decision.reason else ""
        raise CallError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{who} may not {action.value.replace('_', ' ')} {obj!r}{why}",
            Reason.PERMISSION_DENIED,
        )


class Gatekeeper:
    """The master's one door: asks the current Authorizer, logs and counts every denial.

    `authorizer` may be replaced at any time (the ACL file re-read on SIGHUP).
    """

    def __init__(self, authorizer: Authorizer | None = None, on_denied=None) -> None:
        self.authorizer: Authorizer = authorizer or AllowAll()
        # on_denied(principal, action, obj, reason): logging and the denial counter.
        self._on_denied = on_denied

    def check(
        self, principal: str, action: Action, obj: str, aliases: tuple[str, ...] = ()
    ) -> None:
        """Allowed when a rule allows `obj` or one of its `aliases` (a framework's id or its
        name, so an ACL file may name frameworks either way)."""
        for alias in aliases:
            if self.authorizer.authorize(principal, action, alias).allowed:
                return
        try:
            check(self.authorizer, principal, action, obj)
        except CallError as e:
            if self._on_denied is not None:
                self._on_denied(principal, action, obj, e.message)
            raise
