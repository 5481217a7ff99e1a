"""Optimistic offers: the fairness rule and the arithmetic on overlapping offers. Pure.

In optimistic mode (`--offer-mode optimistic`) an agent's free resources are offered to the
first few frameworks in DRF order at once; offers do not hold resources, so a framework that
takes long to decide no longer keeps everyone else waiting (Omega's critique of pessimistic
offers). An Accept commits only if what it launches is still free; the first one wins.

First-come alone would let a fast framework above its fair share take everything a slower
framework below its share was offered, undoing DRF. The rule (docs/allocator.md):

    An Accept by framework F that would leave another framework G's outstanding offer on the
    same agent unsatisfiable is refused (ABORTED, BELOW_SHARE_PRIORITY) while
      1. F's dominant share, counting what it launches, would exceed F's fair share,
      2. G's dominant share is below G's fair share, and
      3. G's offer is younger than the grace period (--optimistic-grace).

So a framework below its share gets first pick of what it is offered for a bounded time and
then competes first-come, and a framework that is a slow decider costs the others at most the
grace period, never its whole decision time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agora.common import Resources
from agora.common.resources import ranges_subtract

__all__ = ["Rival", "beyond", "fair_shares", "priority_rival"]


@dataclass(frozen=True)
class Rival:
    """Another framework's outstanding offer on the agent an Accept would take from."""

    framework_id: str
    share: float  # its dominant share now
    fair_share: float
    offered_at: float  # when it was first offered these resources
    broken: bool  # the Accept would leave its offer unsatisfiable


def priority_rival(
    taker_share_after: float,
    taker_fair_share: float,
    rivals: Iterable[Rival],
    now: float,
    grace_seconds: float,
) -> Rival | None:
    """The rival that has priority over the taker under the rule above (the one furthest
    below its fair share), or None when the Accept may commit."""
    if taker_share_after <= taker_fair_share + 1e-9:
        return None
    best: Rival | None = None
    for rival in rivals:
        if not rival.broken or rival.share >= rival.fair_share - 1e-9:
            continue
        if now - rival.offered_at >= grace_seconds:
            continue
        if best is None or rival.share / rival.fair_share < best.share / best.fair_share:
            best = rival
    return best


def fair_shares(
    roles: Mapping[str, tuple[float, Iterable[str]]],
) -> dict[str, float]:
    """Each framework's fair share of the cluster: its role's weight over all weights, split
    evenly among the role's frameworks. `roles`: role -> (weight, frameworks that count, i.e.
    those that may be offered resources, plus any that is asking)."""
    counted = {name: (weight, list(fids)) for name, (weight, fids) in roles.items() if fids}
    total_weight = sum(weight for weight, _ in counted.values())
    out: dict[str, float] = {}
    if total_weight <= 0:
        return out
    for weight, fids in counted.values():
        each = weight / total_weight / len(fids)
        for fid in fids:
            out[fid] = each
    return out


def beyond(offer: Resources, already: Resources) -> Resources:
    """What of `offer` is not in `already` (scalars floored at 0): the top-up a framework that
    holds offers of `already` on an agent is offered when the agent frees more."""
    scalars = {
        key: value - already.scalars.get(key, 0.0)
        for key, value in offer.scalars.items()
        if value - already.scalars.get(key, 0.0) > 1e-9
    }
    ranges = {
        key: ranges_subtract(spans, already.ranges.get(key, ()))
        for key, spans in offer.ranges.items()
    }
    return Resources(scalars, ranges)
