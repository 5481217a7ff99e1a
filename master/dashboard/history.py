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
    # Keyed by framework id: two frameworks of one name (a restart, a second copy) are two
    # lines, each with a gap where it did not exist. `labels` names them for people.
    frameworks: Mapping[str, float]


class ShareHistory:
    """The last `window` seconds of samples (at most `window / interval` of them)."""

    def __init__(self, window: float = 600.0, interval: float = 2.0) -> None:
        self.interval = interval
        self._samples: deque[Sample] = deque(maxlen=max(1, int(window / interval)))
        self._labels: dict[str, str] = {}  # framework id -> what the chart's legend says

    def add(
        self,
        at: float,
        roles: Mapping[str, float],
        frameworks: Mapping[str, float],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """`frameworks` by id; `labels` (by id, optional) are kept while the id is charted."""
        self._samples.append(Sample(at, dict(roles), dict(frameworks)))
        self._labels.update(labels or {})

    def series(self) -> dict:
        """{"at": [...], "interval": s, "roles": {role: [share|None, ...]}, "frameworks": {id:
        [...]}, "labels": {id: label}}, aligned on at.

        None where a role or framework did not exist at that sample, so a chart leaves a gap.
        """
        samples = list(self._samples)
        out: dict = {"at": [s.at for s in samples], "interval": self.interval}
        for kind in ("roles", "frameworks"):
            names = sorted({n for s in samples for n in getattr(s, kind)})
            out[kind] = {n: [getattr(s, kind).get(n) for s in samples] for n in names}
        self._labels = {k: v for k, v in self._labels.items() if k in out["frameworks"]}
        out["labels"] = {k: self._labels.get(k, k) for k in out["frameworks"]}
        return out
