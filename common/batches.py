"""Batching protobuf messages into one gRPC message, within its size limit (pure).

A relay and the master carry many agents' messages in one stream message each way
(agent_relay.proto). What waits goes in the next message, but never more than BATCH_BYTES of it:
gRPC refuses a message over the receiver's limit (64 MiB, common/rpc.py), which would cut the
stream of every agent carried on it. An item too big to be sent even alone is set apart for the
caller to refuse, so one agent's oversized message ends that agent's link only.
"""

from __future__ import annotations

__all__ = ["BATCH_BYTES", "ITEM_LIMIT", "next_batch"]

BATCH_BYTES = 4 * 1024 * 1024
# The receivers' limit is 64 MiB; a batch's framing and one item's envelope fit in the rest.
ITEM_LIMIT = 64 * 1024 * 1024 - 64 * 1024


def next_batch(
    items: list, budget: int = BATCH_BYTES, limit: int = ITEM_LIMIT
) -> tuple[list, list]:
    """Takes from the front of `items` (in place) what goes in the next message: items in order
    up to `budget` bytes (at least one), and apart, any over `limit` met on the way."""
    batch: list = []
    oversized: list = []
    size = taken = 0
    for item in items:
        n = item.ByteSize()
        if n > limit:
            oversized.append(item)
        elif batch and size + n > budget:
            break
        else:
            batch.append(item)
            size += n + 8  # the repeated field's tag and length
        taken += 1
    del items[:taken]
    return batch, oversized
