"""Who may read a task's sandbox on this agent, and see its environment: the agent's one decision.

The agent's file API (ReadFile, FollowFile, ListFiles, GetUsage, and the environments in
ListTasks) asks `SandboxAccess.check` before it touches a sandbox. Allowed:

- everyone, when the agent has no ACLs (`--acls`), as the master allows everything without
  its own; with TLS, callers are still only holders of the cluster's certificates;
- the principal that subscribed the task's framework (the master says who, with each task);
- the master the agent registered with (it reads sandboxes for its dashboard after checking its
  own ACLs);
- a principal the ACL file's `read_sandboxes` rules allow for the framework (by id or name).

Everything else is PERMISSION_DENIED naming the principal, the action and the framework, logged
and counted. Pure but for the log: no grpc calls, no files.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agora.agent.checkpoint import TaskRecord
from agora.common.acls import AclAuthorizer
from agora.common.authz import Action

log = structlog.get_logger(__name__)


class SandboxDenied(Exception):
    """The caller may not read this sandbox; the message names who, what and whose."""


class SandboxAccess:
    def __init__(
        self,
        acls: AclAuthorizer | None = None,
        on_denied: Callable[[str], None] | None = None,
    ) -> None:
        self.acls = acls  # replaced on SIGHUP, like the master's
        self.master_principal = ""  # from the master's Registered message
        self._on_denied = on_denied  # counts a denial, by action

    def allowed(self, principal: str, record: TaskRecord) -> bool:
        if self.acls is None:
            return True
        if principal and principal in (record.framework_principal, self.master_principal):
            return True
        return any(
            self.acls.authorize(principal, Action.READ_SANDBOX, name).allowed
            for name in (record.framework_id, record.framework_name)
            if name
        )

    def check(self, principal: str, record: TaskRecord, task_id: str) -> None:
        """Raises SandboxDenied unless `principal` may read the sandbox of the run."""
        if self.allowed(principal, record):
            return
        who = principal or "an anonymous caller"
        log.warning(
            "authorization denied",
            principal=principal or "(anonymous)",
            action=str(Action.READ_SANDBOX),
            object=record.framework_id,
            task_id=task_id,
        )
        if self._on_denied is not None:
            self._on_denied(str(Action.READ_SANDBOX))
        raise SandboxDenied(
            f"{who} may not read sandbox {record.framework_id!r} (task {task_id!r}): only its "
            "framework's principal, the master and principals of read_sandboxes may"
        )
