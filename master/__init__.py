"""The Agora master daemon: agent registry, framework sessions, offers, allocation, state.

Modules, outside in: server (Master: wiring, the heartbeat loop), the gRPC services
(scheduler_service, agent_link_service, operator_service, views), the state machine (core,
assembling offer_cycle, agents, frameworks, tasks and ledger), pure checks (offers,
validation), plain data (registry), the durable registry (registry_store) and MasterConfig
(config). The allocation policy itself is agora.master.allocator; README.md draws the paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agora.master.config import MasterConfig
    from agora.master.server import Master

__all__ = ["Master", "MasterConfig"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: Master brings the whole daemon (gRPC services, aiohttp, the
    # dashboard), which importing agora.master.allocator (`agora bench`) must not.
    if name == "Master":
        from agora.master.server import Master

        return Master
    if name == "MasterConfig":
        from agora.master.config import MasterConfig

        return MasterConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
