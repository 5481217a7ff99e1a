"""Offer policies by name, like the sorters: how an agent's free resources become offers.

`AllocatorConfig(offer_mode=...)` picks one; a bad name fails at construction with the list.
Holds (hold_filling.py) are a stage before either policy, not a policy of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from agora.master.allocator.optimistic_offers import OptimisticOffers
from agora.master.allocator.pessimistic import PessimisticOffers
from agora.master.allocator.types import OfferGrant

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator, _Agent


class OfferPolicy(Protocol):
    name: str

    def offer(self, agent: _Agent, now: float, grants: list[OfferGrant]) -> None:
        """Appends to `grants` what this cycle offers of the agent's free resources."""


OFFER_POLICIES: dict[str, Callable[[Allocator], OfferPolicy]] = {
    PessimisticOffers.name: PessimisticOffers,
    OptimisticOffers.name: OptimisticOffers,
}
