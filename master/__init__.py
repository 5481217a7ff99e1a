"""The Agora master daemon: agent registry, framework sessions, offers, allocation, state.

Modules, outside in: server (Master: wiring, allocation and heartbeat loops), the gRPC services
(scheduler_service, agent_link_service, operator_service, views), the state machine (core, with
agents, frameworks and scheduler_calls as its parts), pure checks (offers, validation), plain
data (registry), SQLite persistence (state_store) and MasterConfig (config). The allocation
policy itself is agora.master.allocator.
"""

from agora.master.config import MasterConfig
from agora.master.server import Master

__all__ = ["Master", "MasterConfig"]
