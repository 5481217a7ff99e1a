"""The Agora master daemon: agent registry, framework sessions, offers, allocation, state."""

from master.config import MasterConfig
from master.server import Master

__all__ = ["Master", "MasterConfig"]
