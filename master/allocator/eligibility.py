"""Who may be offered what: the one rule that every offer policy and every explanation asks.

A framework that its sorter yields (active, not suppressed) may be offered `offer` on an agent
unless one of these passes it over:

- FILTERED: a decline filter of its hides that offer (filters.Refusal.hides: it is no more
  than what the framework refused there, and the filter has not expired);
- GPU_AGENT: the agent has GPUs and the framework lacks the GPU_RESOURCES capability (as in
  Mesos: it would strand the scarce GPUs by taking the agent's CPUs and memory).

What the rule does not decide, and who does: suppression and disconnection (the sorters yield
only frameworks that may be offered anything); the offer's size (Allocator._role_offer cuts it
to reservations, quota limits and headroom, and drops scraps below the minimum); holds, which
decline filters and suppression do not stop, on purpose (a hold is its framework's own later
request for a shape, so like a Revive it outranks its declines), while the GPU rule does.

"Why no offers" applies the same function to every agent (AllocatorView.judge), so an
explanation is the decision's own rule, not a second copy of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common import Resources

if TYPE_CHECKING:
    from agora.master.allocator.filters import Refusal

FILTERED = "filtered"
GPU_AGENT = "gpu_agent"


def skip_reason(
    framework_gpu: bool,
    agent_gpus: bool,
    refusal: Refusal | None,
    offer: Resources,
    now: float,
) -> str | None:
    """Why a framework may not be offered `offer` on an agent now, or None if it may.

    `refusal` is the framework's decline filter on that agent, if any (None for holds, which
    filters do not stop)."""
    if agent_gpus and not framework_gpu:
        return GPU_AGENT
    if refusal is not None and refusal.hides(offer, now):
        return FILTERED
    return None
