"""The Agora agent: runs tasks in sandboxes and reports their status reliably to the master.

`AgentDaemon` and `AgentConfig` are imported lazily, so the small task wrapper
(`python -m agora.agent.executor`) starts without loading gRPC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agora.agent.daemon import AgentConfig, AgentDaemon

__all__ = ["AgentConfig", "AgentDaemon"]


def __getattr__(name: str):
    if name in __all__:
        from agora.agent import daemon

        return getattr(daemon, name)
    raise AttributeError(f"module 'agent' has no attribute {name!r}")
