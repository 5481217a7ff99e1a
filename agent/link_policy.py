"""What an agent's link to the master decides, shared by the real agent (agent/link.py) and the
emulated ones (agora.experiments.emulated), so the emulator behaves as the agent does.

Pure: no I/O. The links keep their own I/O (the emulator multiplexes thousands of agents over
a few channels and timers), and take from here when the master is to be taken for gone and how
long to wait before dialling again.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import NamedTuple

from agora.common.backoff import Backoff
from agora.common.errors import busy_retry_after

__all__ = ["MIN_SILENCE_SECONDS", "Wait", "WaitReason", "retry_delay", "silence_limit"]

# A master that does not answer a Register for this long (at least) is taken for gone. Once an
# agent is registered the master sends nothing while there is nothing to say, and the channel's
# gRPC keepalive (common/rpc.py) is what notices a master that is gone.
MIN_SILENCE_SECONDS = 3.0


def silence_limit(heartbeat_interval: float, missed_heartbeats: int) -> float:
    """Seconds without an answer to a Register after which the link dials again."""
    return max(heartbeat_interval * missed_heartbeats, MIN_SILENCE_SECONDS)


class WaitReason(enum.Enum):
    MASTER_BUSY = "the master said when to come back"
    LEADER_HINT = "following the master set"
    BACKOFF = "the jittered backoff"


class Wait(NamedTuple):
    seconds: float
    reason: WaitReason


def retry_delay(
    error: BaseException,
    backoff: Backoff,
    hint: float | None = None,
    rng: Callable[[], float] = random.random,
) -> Wait:
    """How long to wait after a failed attempt, and why: the master's own word first (MASTER_BUSY
    names a time, spread by up to as much again so that a wave of agents turned away together
    does not come back together), then a hint from following the master set (`hint`, from
    LeaderTracker.on_error), else the jittered backoff."""
    busy = busy_retry_after(error)
    if busy is not None:
        return Wait(busy * (1.0 + rng()), WaitReason.MASTER_BUSY)
    if hint is not None:
        return Wait(hint, WaitReason.LEADER_HINT)
    return Wait(backoff.next_delay(), WaitReason.BACKOFF)
