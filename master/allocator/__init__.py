"""Pure allocation: hierarchical weighted DRF with quota, reservations, filters and suppression.

No grpc, no asyncio, no clock: the master passes `now` in and sends the OfferGrants it gets back.
"""

from agora.master.allocator.allocator import GPU_CAPABILITY, Allocator, HoldRefused
from agora.master.allocator.drf import DRFSorter, dominant_share, scalar_vector
from agora.master.allocator.eligibility import Visit
from agora.master.allocator.holds import Hold
from agora.master.allocator.optimistic import Rival
from agora.master.allocator.protocol import AllocatorProtocol
from agora.master.allocator.quota import Quota
from agora.master.allocator.random_sorter import RandomSorter
from agora.master.allocator.revocable import REVOCABLE_CAPABILITY
from agora.master.allocator.sorter import Sorter
from agora.master.allocator.sorters import SORTERS, make_sorter, sorter_names
from agora.master.allocator.types import (
    DEFAULT_MIN_ALLOCATABLE,
    MAX_REFUSE_SECONDS,
    AllocatorConfig,
    OfferGrant,
)
from agora.master.allocator.view import AllocatorView

__all__ = [
    "AllocatorProtocol",
    "AllocatorView",
    "DEFAULT_MIN_ALLOCATABLE",
    "GPU_CAPABILITY",
    "MAX_REFUSE_SECONDS",
    "SORTERS",
    "Allocator",
    "AllocatorConfig",
    "DRFSorter",
    "Hold",
    "HoldRefused",
    "OfferGrant",
    "Quota",
    "RandomSorter",
    "REVOCABLE_CAPABILITY",
    "Rival",
    "Sorter",
    "Visit",
    "dominant_share",
    "make_sorter",
    "scalar_vector",
    "sorter_names",
]
