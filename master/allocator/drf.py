"""Dominant Resource Fairness: share arithmetic and the heap-ordered DRF sorter."""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterator, Mapping

from agora.common import UNRESERVED, Resources
from agora.master.allocator.sorter import Client, Sorter

# Scalar amounts by resource name, flattened over roles, in thousandths: Resources' own
# granularity, so integer sums are exact and millions of add/subtract never drift.
Vector = dict[str, int]
MILLI = 1000


def scalar_vector(resources: Resources) -> Vector:
    """The scalars of `resources` summed per name over roles (what DRF compares), in 1/1000."""
    out: Vector = {}
    for (name, _role), value in resources.scalars.items():
        out[name] = out.get(name, 0) + round(value * MILLI)
    return out


def covers(have: Mapping[str, int], need: Mapping[str, int]) -> bool:
    """Whether `have` holds every amount in `need` (an empty need is always covered)."""
    for name, amount in need.items():  # a loop, not all(...): it runs per agent per cycle
        if have.get(name, 0) < amount:
            return False
    return True


def vector_resources(vec: Mapping[str, int]) -> Resources:
    """A vector back as unreserved Resources (for display and the Operator API)."""
    return Resources({(name, UNRESERVED): v / MILLI for name, v in vec.items() if v > 0})


def inverse_totals(total: Mapping[str, int]) -> dict[str, float]:
    """1/total per resource the cluster has, so a share is a multiplication."""
    return {name: 1.0 / value for name, value in total.items() if value > 0}


def dominant_share(allocated: Mapping[str, int], inverse_total: Mapping[str, float]) -> float:
    """max over resources of allocated/total: the share DRF equalizes."""
    share = 0.0
    for name, value in allocated.items():
        inv = inverse_total.get(name)
        if inv is not None and value * inv > share:
            share = value * inv
    return share


class DRFSorter(Sorter):
    """Lowest weighted dominant share first (share / weight), ties broken by name.

    Active clients sit in a binary heap of (share / weight, name, seq). A share change pushes a
    fresh entry with a new seq and leaves the old one to be skipped when popped, so an update is
    O(log n) and the allocator never re-sorts every client after each offer.
    """

    name = "drf"

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed)
        self._heap: list[tuple[float, str, int]] = []
        self._seq = 0
        self._in_flight: set[str] = set()  # popped by a running sorted(); it re-files them

    def _push(self, c: Client) -> None:
        self._seq += 1
        c.seq = self._seq
        if c.name in self._in_flight:
            return
        heapq.heappush(self._heap, (c.share / c.weight, c.name, c.seq))
        if not self._in_flight and len(self._heap) > 2 * len(self._clients) + 8:
            self._compact()

    def _compact(self) -> None:
        entries = []
        for c in self._clients.values():
            if c.active:
                self._seq += 1
                c.seq = self._seq
                entries.append((c.share / c.weight, c.name, c.seq))
        heapq.heapify(entries)
        self._heap = entries

    def remove(self, name: str) -> None:
        super().remove(name)  # its heap entry goes stale: skipped when popped

    def activate(self, name: str) -> None:
        c = self._clients[name]
        if not c.active:
            c.active = True
            self._push(c)

    def deactivate(self, name: str) -> None:
        self._clients[name].active = False

    def set_weight(self, name: str, weight: float) -> None:
        super().set_weight(name, weight)
        c = self._clients[name]
        if c.active:
            self._push(c)

    def update(self, name: str, share: float) -> None:
        c = self._clients[name]
        if c.share == share:
            return
        c.share = share
        if c.active:
            self._push(c)

    def sorted(self) -> Generator[str, None, None]:
        heap = self._heap  # not replaced while clients are in flight (see _push)
        clients = self._clients
        in_flight = self._in_flight
        popped: list[Client] = []
        try:
            while heap:
                _key, name, seq = heapq.heappop(heap)
                c = clients.get(name)
                if c is None or c.seq != seq or not c.active:
                    continue  # stale entry
                in_flight.add(name)
                popped.append(c)
                yield name
        finally:
            in_flight.clear()
            for c in popped:
                if c.active and clients.get(c.name) is c:
                    self._seq += 1
                    c.seq = self._seq
                    heapq.heappush(heap, (c.share / c.weight, c.name, c.seq))

    def peek_order(self) -> Iterator[str]:
        # Walks the heap array in key order with a small frontier heap of (entry, index):
        # O(log k) per client read, and the heap itself is left as it was.
        if self.first() is None:  # drops stale entries at the head, the usual ones
            return
        heap = self._heap
        clients = self._clients
        size = len(heap)
        frontier = [(heap[0], 0)]
        pop, push = heapq.heappop, heapq.heappush
        while frontier:
            entry, i = pop(frontier)
            c = clients.get(entry[1])
            if c is not None and c.seq == entry[2] and c.active:
                yield entry[1]
            child = 2 * i + 1
            if child < size:
                push(frontier, (heap[child], child))
                if child + 1 < size:
                    push(frontier, (heap[child + 1], child + 1))

    def first(self) -> str | None:
        heap = self._heap
        clients = self._clients
        while heap:
            _key, name, seq = heap[0]
            c = clients.get(name)
            if c is not None and c.seq == seq and c.active:
                return name
            heapq.heappop(heap)  # stale: drop it for good
        return None

    def order(self) -> list[str]:
        active = [c for c in self._clients.values() if c.active]
        active.sort(key=lambda c: (c.share / c.weight, c.name))
        return [c.name for c in active]
