"""The task manager's sense of time: the wall clock it stamps records with, and its sleeps.

Injected (`TaskManager(clock=...)`) so that the agent's harness (tests/agent/agent_harness.py)
pauses it: a kill's grace period or a sandbox's GC delay passes when the test advances the
clock, without sleeping, as Mesos' tests pause theirs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "AgentClock", "SystemClock"]


class AgentClock(Protocol):
    def time(self) -> float:
        """The wall clock (seconds since the epoch): run records, status updates, GC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Returns `seconds` later on this clock."""
        ...


class SystemClock:
    """Real time: time.time and asyncio.sleep."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
