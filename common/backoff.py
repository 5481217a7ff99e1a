"""Exponential backoff, the one used everywhere: pure, with the randomness injected.

`exponential(n, ...)` is the plain delay before attempt n (a batch retry, a service restart);
`Backoff` draws jittered delays for reconnecting (the SDK's driver, the agent's link to the
master, the emulated agents), so that clients cut off by one master restart do not all dial it
again in the same instant.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff", "exponential"]


def exponential(attempt: int, initial: float, factor: float, cap: float) -> float:
    """The delay before attempt `attempt` (1-based): initial * factor**(attempt - 1), at most
    `cap`; 0 for attempt 0 (nothing has failed yet)."""
    if attempt <= 0:
        return 0.0
    # Bounding the exponent keeps the power from overflowing after a long run of failures.
    return min(cap, initial * factor ** min(attempt - 1, 1000))


@dataclass
class Backoff:
    """Delays that double from `initial` up to `cap`, each drawn at random from the upper part
    of its band: attempt n waits between max(initial, (1 - jitter) * b) and b, where
    b = min(cap, initial * factor ** (n + 1)). With the defaults: 0.2-0.4 s, 0.4-0.8 s, ...,
    5-10 s. The randomness keeps the frameworks cut off by one master restart from all dialling
    it again in the same instant."""

    initial: float = 0.2
    cap: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap:
            raise ValueError("backoff needs 0 < initial <= cap")
        if self.factor < 1 or not 0 <= self.jitter < 1:
            raise ValueError("backoff needs factor >= 1 and 0 <= jitter < 1")

    def next_delay(self) -> float:
        self.attempts += 1
        high = exponential(self.attempts + 1, self.initial, self.factor, self.cap)
        low = max(self.initial, high * (1 - self.jitter))
        return low + (high - low) * self.rng.random()

    def reset(self) -> None:
        self.attempts = 0
