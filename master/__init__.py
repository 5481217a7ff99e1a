"""The Agora master daemon: agent registry, framework sessions, offers, allocation, state.

Modules, outside in: server (Master: wiring, the heartbeat loop), the gRPC services
(scheduler_service, agent_link_service, operator_service, views), the state machine (core,
assembling offer_cycle, agents, frameworks, tasks and ledger), pure checks (offers,
validation), plain data (registry), the durable registry (registry_store) and MasterConfig
(config). The allocation policy itself is agora.master.allocator; README.md draws the paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common.lazy import exports_on_first_use

if TYPE_CHECKING:
    from agora.master.config import MasterConfig
    from agora.master.server import Master
else:
    # Loaded on first use: Master brings the whole daemon (gRPC services, aiohttp, the
    # dashboard), which importing agora.master.allocator (`agora bench`) must not.
    __getattr__, __dir__ = exports_on_first_use(
        __name__,
        {"agora.master.server": ("Master",), "agora.master.config": ("MasterConfig",)},
    )

__all__ = ["Master", "MasterConfig"]
