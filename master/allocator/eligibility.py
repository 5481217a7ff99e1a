"""Who may be offered what: the one rule that every offer policy and every explanation asks.

A framework that its sorter yields (active, not suppressed) may be offered `offer` on an agent
unless one of these passes it over:

- FILTERED: a decline filter of its hides that offer (filters.Refusal.hides: it is no more
  than what the framework refused there, and the filter has not expired);
- GPU_AGENT: the agent has GPUs and the framework lacks the GPU_RESOURCES capability (as in
  Mesos: it would strand the scarce GPUs by taking the agent's CPUs and memory);
- TOO_SMALL: the framework said the smallest task it waits to launch (scheduler.proto, Wants)
  and the offer cannot hold it (Mesos' per-framework min_allocatable_resources, one shape).

What the rule does not decide, and who does: suppression and disconnection (the sorters yield
only frameworks that may be offered anything); the offer's size (Allocator._role_offer cuts it
to reservations, quota limits and headroom, and drops scraps below the minimum); holds, which
decline filters and suppression do not stop, on purpose (a hold is its framework's own later
request for a shape, so like a Revive it outranks its declines), while the GPU rule does.
`barred` is that part of the rule, which holds whatever is offered: holds collecting, the
agents a hold could ever fit on, the room preemption may make for a role, and the rivals an
optimistic Accept must respect all ask it.

Every cycle leaves on each agent it offers a `Visit`: whom it offered and why it passed each
other framework over, as Nomad's AllocMetric records what each filter removed. "Why no offers"
(AllocatorView.judge) reads that record where one stands, and applies the same function only
to agents no cycle has decided on since they last changed, so an explanation is the decision's
own record, not a second copy of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from agora.common import EMPTY, Resources
from agora.master.allocator.drf import covers, scalar_vector

if TYPE_CHECKING:
    from agora.master.allocator.filters import Refusal

FILTERED = "filtered"
GPU_AGENT = "gpu_agent"
TOO_SMALL = "too_small"


def skip_reason(
    framework_gpu: bool,
    agent_gpus: bool,
    refusal: Refusal | None,
    offer: Resources,
    now: float,
    smallest: Mapping[str, int] | None = None,
    offer_vec: Mapping[str, int] | None = None,
) -> str | None:
    """Why a framework may not be offered `offer` on an agent now, or None if it may.

    `refusal` is the framework's decline filter on that agent, if any (None for holds, which
    filters do not stop). `smallest`: the framework's smallest task as a DRF vector, if it
    said one; `offer_vec` is `offer`'s vector where the caller has it."""
    if agent_gpus and not framework_gpu:
        return GPU_AGENT
    if refusal is not None and refusal.hides(offer, now):
        return FILTERED
    if smallest and not covers(
        offer_vec if offer_vec is not None else scalar_vector(offer), smallest
    ):
        return TOO_SMALL
    return None


def barred(framework_gpu: bool, agent_gpus: bool) -> str | None:
    """Why a framework may be offered nothing at all on an agent, filters aside (a hold's
    request or a preemption's demand comes after its declines), or None."""
    return skip_reason(framework_gpu, agent_gpus, None, EMPTY, 0.0)


class Visit(NamedTuple):
    """What the last cycle that offered an agent decided there (AllocatorView.last_cycle).

    The policies keep it in the agent's own fields (`visit_at`, `visit_free`, `visit_offered`,
    `visit_skipped`), a list and a dict they empty and refill: one is written for every agent
    every cycle, and building an object for each would cost the cycle its time and the garbage
    collector its work. It stands while the agent's free resources are the very object it
    names: anything freed or taken there since (a recover, an Accept, a hold) makes a new one,
    a new decline filter on the agent or a framework's change of the GPU capability drops it,
    and the next cycle writes a fresh one."""

    at: float  # the cycle's `now`
    free: Resources  # the agent's free resources when the cycle left it
    offered: tuple[str, ...]  # frameworks offered there, in the order they were
    skipped: Mapping[str, str]  # framework_id -> the rule's reason to pass it over

    def reason(self, framework_id: str) -> tuple[bool, str | None]:
        """(whether the cycle decided on the framework here, its reason to pass it over): a
        framework it offered here has none, even if an earlier stage passed it over."""
        return recorded(self.offered, self.skipped, framework_id)


def recorded(
    offered: Sequence[str], skipped: Mapping[str, str], framework_id: str
) -> tuple[bool, str | None]:
    """Visit.reason, on the fields an agent keeps its visit in."""
    if framework_id in offered:
        return True, None
    why = skipped.get(framework_id)
    return why is not None, why
