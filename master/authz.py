"""The master's door: every authorization decision of the master is made here, by one Authorizer.

The services ask `check(authorizer, principal, action, obj)` before acting; the principal is the
caller's certificate name (agora.common.credentials.caller_principal, "" without TLS). The
default, `AllowAll`, allows everything, as Agora did before ACLs; an ACL file (`--acls`,
common/acls.py) gives a rule-based Authorizer behind the same protocol (common/authz.py, which
the agents use too). A refusal is a CallError, the master's.
"""

from __future__ import annotations

import grpc

from agora.common.authz import (
    EXPLICIT_ONLY,
    Action,
    AllowAll,
    Authorizer,
    Decision,
    refusal_message,
)
from agora.master.errors import CallError, Reason

__all__ = ["EXPLICIT_ONLY", "Action", "AllowAll", "Authorizer", "Decision", "Gatekeeper", "check"]


def check(authorizer: Authorizer, principal: str, action: Action, obj: str) -> None:
    """Raises CallError(PERMISSION_DENIED) naming the principal, the action and the object."""
    decision = authorizer.authorize(principal, action, obj)
    if not decision.allowed:
        raise CallError(
            grpc.StatusCode.PERMISSION_DENIED,
            refusal_message(principal, action, obj, decision),
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

    def check_framework(
        self, principal: str, action: Action, framework_id: str, owner: str, name: str
    ) -> None:
        """`action` on a framework (its tasks, its teardown): always allowed to the principal
        that subscribed it (`owner`); to anyone else as an ACL naming it, by id or by name,
        allows. The Operator API and the dashboard both decide it here."""
        if principal and principal == owner:
            return
        self.check(principal, action, framework_id, (name,))
