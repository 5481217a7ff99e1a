"""The sorter interface: orders clients (roles, or frameworks in a role) for allocation."""

from __future__ import annotations

from collections.abc import Generator, Iterator


class Client:
    """A sorter's record of one client: its dominant share, weight and whether it may get offers."""

    __slots__ = ("name", "share", "weight", "active", "seq")

    def __init__(self, name: str, weight: float) -> None:
        self.name = name
        self.share = 0.0  # unweighted dominant share, told by the allocator
        self.weight = weight
        self.active = False
        self.seq = 0  # version of the heap entry that is current (DRF only)


class Sorter:
    """Base of every sorter. Like Mesos' sorter.hpp, but the allocator computes the shares.

    Clients start inactive; only active clients come out of `sorted()`. `sorted()` is lazy: the
    allocator stops at the first client that takes an agent, so a sort costs O(log n), not
    O(n log n). Close the iterator when done with it (the DRF sorter re-files what it popped).
    """

    name = "base"

    def __init__(self, seed: int | None = None) -> None:
        self._clients: dict[str, Client] = {}

    # membership -------------------------------------------------------------------------

    def add(self, name: str, weight: float = 1.0) -> None:
        if name in self._clients:
            raise ValueError(f"sorter client {name!r} already added")
        self._clients[name] = Client(name, _check_weight(weight))

    def remove(self, name: str) -> None:
        self._clients.pop(name, None)

    def activate(self, name: str) -> None:
        self._clients[name].active = True

    def deactivate(self, name: str) -> None:
        self._clients[name].active = False

    def __contains__(self, name: object) -> bool:
        return name in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    # shares -----------------------------------------------------------------------------

    def set_weight(self, name: str, weight: float) -> None:
        self._clients[name].weight = _check_weight(weight)

    def update(self, name: str, share: float) -> None:
        """Records a client's new (unweighted) dominant share."""
        self._clients[name].share = share

    def share(self, name: str) -> float:
        return self._clients[name].share

    def weight(self, name: str) -> float:
        return self._clients[name].weight

    def is_active(self, name: str) -> bool:
        return self._clients[name].active

    # order ------------------------------------------------------------------------------

    def sorted(self) -> Generator[str, None, None]:
        """Active clients, first to be offered first; lazy."""
        raise NotImplementedError

    def order(self) -> list[str]:
        """The whole current order of active clients, without disturbing the sorter."""
        raise NotImplementedError

    def peek_order(self) -> Iterator[str]:
        """Active clients in order, lazily, without changing the sorter; stop iterating as
        soon as the sorter changes (a share update may reorder what is left)."""
        yield from self.order()

    def first(self) -> str | None:
        """The client `sorted()` would yield first, or None; the allocator's fast path."""
        it = self.sorted()
        try:
            return next(it, None)
        finally:
            it.close()


def _check_weight(weight: float) -> float:
    weight = float(weight)
    if not weight > 0 or weight == float("inf"):
        raise ValueError(f"weight must be a positive finite number, got {weight}")
    return weight
