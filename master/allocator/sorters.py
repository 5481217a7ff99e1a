"""The sorters by name: sorter names -> factories, checked when the config is built."""

from __future__ import annotations

from collections.abc import Callable

from agora.master.allocator.drf import DRFSorter
from agora.master.allocator.random_sorter import RandomSorter
from agora.master.allocator.sorter import Sorter

SorterFactory = Callable[[int | None], Sorter]

# Add a policy here and every common sorter test runs over it too.
SORTERS: dict[str, SorterFactory] = {
    DRFSorter.name: DRFSorter,
    RandomSorter.name: RandomSorter,
}


def sorter_names() -> list[str]:
    return sorted(SORTERS)


def check_sorter_name(kind: str, name: str) -> None:
    if name not in SORTERS:
        raise ValueError(f"unknown {kind} {name!r}; valid sorters: {', '.join(sorter_names())}")


def make_sorter(name: str, seed: int | None = None) -> Sorter:
    check_sorter_name("sorter", name)
    return SORTERS[name](seed)
