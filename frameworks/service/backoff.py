"""Restart backoff, Marathon-style: after each failure the next launch waits longer. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from agora.common.backoff import exponential

DEFAULT_BACKOFF_SECONDS = 1.0
DEFAULT_BACKOFF_FACTOR = 1.15
DEFAULT_MAX_LAUNCH_DELAY = 300.0


@dataclass
class RestartBackoff:
    """`initial` seconds after the first failure, times `factor` after each further one, at
    most `cap`. Reset when the app is changed or scaled, or an instance has served a while."""

    initial: float = DEFAULT_BACKOFF_SECONDS
    factor: float = DEFAULT_BACKOFF_FACTOR
    cap: float = DEFAULT_MAX_LAUNCH_DELAY
    failures: int = 0
    delayed_until: float = 0.0

    def delay(self) -> float:
        """The wait after the failures so far (0 before any)."""
        return exponential(self.failures, self.initial, self.factor, self.cap)

    def failed(self, now: float) -> float:
        """Records a failure at `now`; returns the time before which nothing is launched."""
        self.failures += 1
        self.delayed_until = now + self.delay()
        return self.delayed_until

    def reset(self) -> None:
        self.failures = 0
        self.delayed_until = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.delayed_until

    def remaining(self, now: float) -> float:
        return max(0.0, self.delayed_until - now)
