"""Jittered exponential backoff for reconnecting: pure, with the randomness injected."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays of initial, 2x, 4x ... capped at `cap`, each scaled by a random factor in
    [1 - jitter, 1] (never below `initial`), so that many frameworks cut off by one master
    restart do not all dial it again in the same instant."""

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
        # Bounding the exponent keeps the power from overflowing after many attempts.
        exponent = min(self.attempts, 64)
        base = min(self.cap, self.initial * self.factor**exponent)
        self.attempts += 1
        scaled = base * (1 - self.jitter * self.rng.random())
        return min(self.cap, max(self.initial, scaled))

    def reset(self) -> None:
        self.attempts = 0
