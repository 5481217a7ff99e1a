"""Dominant shares over time, for the dashboard's live DRF chart. Pure: the caller samples."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ShareHistory"]


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the epoch
    roles: Mapping[str, float]
    frameworks: Mapping[str, float]  # keyed by framework name (ids mean little to people)


class ShareHistory:
    """The last `window` seconds of samples (at most `window / interval` of them)."""

    def __init__(self, window: float = 600.0, interval: float = 2.0) -> None:
        self.interval = interval
        self._samples: deque[Sample] = deque(maxlen=max(1, int(window / interval)))

    def add(self, at: float, roles: Mapping[str, float], frameworks: Mapping[str, float]) -> None:
        self._samples.append(Sample(at, dict(roles), dict(frameworks)))

    def series(self) -> dict:
        """{"at": [...], "roles": {role: [share|None, ...]}, "frameworks": {...}} aligned on at.

        None where a role or framework did not exist at that sample, so a chart leaves a gap.
        """
        samples = list(self._samples)
        out: dict = {"at": [s.at for s in samples], "roles": {}, "frameworks": {}}
        for kind in ("roles", "frameworks"):
            names = sorted({n for s in samples for n in getattr(s, kind)})
            out[kind] = {n: [getattr(s, kind).get(n) for s in samples] for n in names}
        return out
