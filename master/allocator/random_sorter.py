"""The random sorter: a fresh random order of active clients for every agent offered."""

from __future__ import annotations

import random
from collections.abc import Iterator

from master.allocator.sorter import Sorter


class RandomSorter(Sorter):
    """Ignores shares; Mesos' RandomSorter, useful as a baseline for fairness experiments.

    Weights still count: a client of weight 2 is twice as likely to come first.
    """

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self._rng = random.Random(seed)

    def sorted(self) -> Iterator[str]:
        yield from self.order()

    def order(self) -> list[str]:
        active = [c for c in self._clients.values() if c.active]
        # Weighted shuffle without replacement (Efraimidis-Spirakis keys).
        rng = self._rng
        keyed = [(rng.random() ** (1.0 / c.weight), c.name) for c in active]
        keyed.sort(reverse=True)
        return [name for _key, name in keyed]
