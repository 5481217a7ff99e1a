"""Pure allocation: hierarchical weighted DRF with quota, reservations, filters and suppression.

No grpc, no asyncio, no clock: the master passes `now` in and sends the OfferGrants it gets back.
"""

from master.allocator.allocator import GPU_CAPABILITY, Allocator
from master.allocator.drf import DRFSorter, dominant_share, scalar_vector
from master.allocator.quota import Quota
from master.allocator.random_sorter import RandomSorter
from master.allocator.sorter import Sorter
from master.allocator.sorters import SORTERS, make_sorter, sorter_names
from master.allocator.types import (
    DEFAULT_MIN_ALLOCATABLE,
    MAX_REFUSE_SECONDS,
    AllocatorConfig,
    OfferGrant,
)

__all__ = [
    "DEFAULT_MIN_ALLOCATABLE",
    "GPU_CAPABILITY",
    "MAX_REFUSE_SECONDS",
    "SORTERS",
    "Allocator",
    "AllocatorConfig",
    "DRFSorter",
    "OfferGrant",
    "Quota",
    "RandomSorter",
    "Sorter",
    "dominant_share",
    "make_sorter",
    "scalar_vector",
    "sorter_names",
]
