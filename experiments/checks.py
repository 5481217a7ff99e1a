"""A target as a value: an experiment's checks return these, its report records them.

An experiment's checks are pure functions over what its run measured, so they are unit-tested
without a cluster; the report writes each one into results.json with `record`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agora.experiments.results import Results

__all__ = ["Check", "record"]


@dataclass(frozen=True)
class Check:
    """A figure against its limit: Results.target's arguments, decided before it is written."""

    name: str
    figure: float | None  # None: this run did not measure it
    limit: float
    unit: str
    at_most: bool = True
    measured_in: str = ""  # the results.json field the figure comes from
    not_measured: str = ""  # why, in words, when figure is None

    @property
    def met(self) -> bool | None:
        if self.figure is None:
            return None
        return self.figure <= self.limit if self.at_most else self.figure >= self.limit

    def line(self) -> str:
        """'tasks lost: 0 tasks (limit <= 0 tasks) pass', for a test's message or a terminal."""
        if self.figure is None:
            why = f" ({self.not_measured})" if self.not_measured else ""
            return f"{self.name}: not measured{why}"
        sign = "<=" if self.at_most else ">="
        verdict = "pass" if self.met else "FAIL"
        return (
            f"{self.name}: {self.figure:g} {self.unit} (limit {sign} {self.limit:g} {self.unit}) "
            f"{verdict}"
        )


def record(results: Results, checks: Iterable[Check]) -> None:
    """Writes each check as a target of `results`, in order."""
    for c in checks:
        results.target(c.name, c.figure, c.limit, c.unit, c.at_most, c.measured_in, c.not_measured)
