"""What a task's environment starts from: nothing of the agent's but what the operator allows.

The agent used to copy its whole environment into every task, so a secret set for the agent
(a token, a cloud key) reached every tenant's task (issue 35). A task now starts from a fixed
PATH and the variables the operator names with `agora agent --task-env NAME` (their values
from the agent's environment), then Agora's own (task id, sandbox, ports, user) and the
command's. Nomad's exec driver and Kubernetes work the same way; Mesos passes
`--executor_environment_variables` instead of its own environment when given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["DEFAULT_PATH", "base_environment"]

# The PATH of Debian's /etc/profile for root, as Docker and Nomad give a task: the system's
# programs, nothing of the agent's virtual environment.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def base_environment(
    allowed: Iterable[str] = (), source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """PATH, then every allowed name the agent's environment (`source`) sets. Pure."""
    source = os.environ if source is None else source
    env = {"PATH": DEFAULT_PATH}
    for name in allowed:
        if name in source:
            env[name] = source[name]
    return env
