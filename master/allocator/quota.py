"""Quota: a guarantee held back as headroom for a role, and a limit it is never offered beyond."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agora.common import UNRESERVED, Resources
from agora.master.allocator.drf import MILLI, Vector, scalar_vector


@dataclass(frozen=True)
class Quota:
    """Per-name scalar amounts; names a bound does not mention are unbounded by it."""

    guarantee: Vector  # in thousandths, like every Vector
    limit: Vector | None  # None: no limit

    def unmet(self, consumed: Mapping[str, int]) -> Vector:
        """What the role still lacks to reach its guarantee (names with a shortfall only)."""
        out: Vector = {}
        for name, amount in self.guarantee.items():
            lack = amount - consumed.get(name, 0)
            if lack > 0:
                out[name] = lack
        return out

    def at_limit(self, consumed: Mapping[str, int]) -> list[str]:
        """Names whose consumption has reached the limit."""
        if self.limit is None:
            return []
        return [n for n, cap in self.limit.items() if consumed.get(n, 0) >= cap]


def make_quota(guarantee: Resources | None, limit: Resources | None) -> Quota | None:
    """Validates and flattens a quota; None when it sets nothing (i.e. clears the quota)."""
    for label, value in (("guarantee", guarantee), ("limit", limit)):
        if value is not None and value.ranges:
            raise ValueError(f"quota {label} takes scalars only (cpus, mem, disk, gpus): {value}")
    g = scalar_vector(guarantee) if guarantee is not None else {}
    lim = scalar_vector(limit) if limit is not None else None
    if lim is not None:
        for name, amount in g.items():
            if name in lim and amount > lim[name]:
                raise ValueError(
                    f"quota guarantee {name}:{amount / MILLI:g} exceeds its limit "
                    f"{name}:{lim[name] / MILLI:g}"
                )
    if not g and lim is None:
        return None
    return Quota(g, lim)


def add_into(target: Vector, vec: Mapping[str, int], sign: int = 1) -> None:
    """target += sign * vec."""
    for name, amount in vec.items():
        target[name] = target.get(name, 0) + sign * amount


def required_headroom(unmet_by_role: Iterable[Vector]) -> Vector:
    """Unreserved free resources to hold back so every role can still reach its guarantee."""
    out: Vector = {}
    for unmet in unmet_by_role:
        add_into(out, unmet)
    return out


def cap_unreserved(offer: Resources, caps: Mapping[str, float]) -> Resources:
    """`offer` with its unreserved scalars cut to `caps` in 1/1000 (reservations never cut)."""
    changed = False
    scalars = {}
    for key, value in offer.scalars.items():
        name, role = key
        cap = caps.get(name)
        if role == UNRESERVED and cap is not None and round(value * MILLI) > cap:
            value = math.floor(max(cap, 0)) / MILLI
            changed = True
        scalars[key] = value
    if not changed:
        return offer
    return Resources(scalars, offer.ranges)


def min_caps(*caps: Mapping[str, int]) -> Vector:
    out: Vector = {}
    for c in caps:
        for name, value in c.items():
            out[name] = min(out.get(name, value), value)
    return out
