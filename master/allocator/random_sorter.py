"""The random sorter: a fresh random order of active clients for every agent offered."""

from __future__ import annotations

import random
from collections.abc import Generator, Iterator

from agora.master.allocator.sorter import Sorter


class RandomSorter(Sorter):
    """Ignores shares; Mesos' RandomSorter, useful as a baseline for fairness experiments.

    Weights still count: a client of weight 2 is twice as likely to come first. With equal
    weights the active clients sit in a list, so `first()` is O(1) and `sorted()` a lazy
    Fisher-Yates shuffle.
    """

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self._rng = random.Random(seed)
        self._active: list[str] = []
        self._index: dict[str, int] = {}
        self._weighted = 0  # active clients whose weight is not 1

    def _add_active(self, name: str) -> None:
        if name not in self._index:
            self._index[name] = len(self._active)
            self._active.append(name)
            if self._clients[name].weight != 1.0:
                self._weighted += 1

    def _drop_active(self, name: str) -> None:
        i = self._index.pop(name, None)
        if i is None:
            return
        last = self._active.pop()
        if last != name:
            self._active[i] = last
            self._index[last] = i
        c = self._clients.get(name)
        if c is not None and c.weight != 1.0:
            self._weighted -= 1

    def remove(self, name: str) -> None:
        self._drop_active(name)
        super().remove(name)

    def activate(self, name: str) -> None:
        super().activate(name)
        self._add_active(name)

    def deactivate(self, name: str) -> None:
        self._drop_active(name)
        super().deactivate(name)

    def set_weight(self, name: str, weight: float) -> None:
        active = name in self._index
        if active:
            self._drop_active(name)
        super().set_weight(name, weight)
        if active:
            self._add_active(name)

    def sorted(self) -> Generator[str, None, None]:
        if self._weighted:
            yield from self.order()
            return
        names = list(self._active)
        rng = self._rng.random
        n = len(names)
        while n:
            i = int(rng() * n)
            n -= 1
            names[i], names[n] = names[n], names[i]
            c = self._clients.get(names[n])
            if c is not None and c.active:
                yield names[n]

    def peek_order(self) -> Iterator[str]:
        return self.sorted()  # lazy, and it changes nothing but the random state

    def first(self) -> str | None:
        if self._weighted or not self._active:
            return super().first()
        return self._active[int(self._rng.random() * len(self._active))]

    def order(self) -> list[str]:
        active = [self._clients[name] for name in self._active]
        # Weighted shuffle without replacement (Efraimidis-Spirakis keys).
        rng = self._rng
        keyed = [(rng.random() ** (1.0 / c.weight), c.name) for c in active]
        keyed.sort(reverse=True)
        return [name for _key, name in keyed]
