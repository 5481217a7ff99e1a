"""Resource values and their arithmetic: parsing, formatting, proto conversion.

A `Resources` value maps (name, role) to an amount: a scalar for cpus, mem, disk and gpus (mem
and disk in MB), or a set of inclusive integer ranges for ports. Role "*" means unreserved; any
other role marks a static reservation, written `cpus(analytics):2` on the command line.

Values are immutable: every operation returns a new one. Scalars are kept to Mesos'
granularity of 0.001 so that repeated adding and subtracting never drifts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping

from agora.v1 import common_pb2

UNRESERVED = "*"
SCALAR_NAMES = frozenset({"cpus", "mem", "disk", "gpus"})
RANGE_NAMES = frozenset({"ports"})
KNOWN_NAMES = SCALAR_NAMES | RANGE_NAMES
# Larger amounts are refused (Mesos' fixed point stops near 9.2e15): the allocator counts
# thousandths in integers, and 1e308 cpus overflowed to infinity there.
MAX_SCALAR = 1e15

Key = tuple[str, str]  # (name, role)
RangeSet = tuple[tuple[int, int], ...]  # sorted, merged, inclusive


class ResourceError(ValueError):
    """A resource value or string that cannot be used; the message says what to change."""


def _round(value: float) -> float:
    return round(value, 3)


# --- ranges -------------------------------------------------------------------------------


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> RangeSet:
    """Sorts and merges overlapping or adjacent ranges."""
    merged: list[list[int]] = []
    for begin, end in sorted(ranges):
        if begin > end:
            raise ResourceError(f"range [{begin}-{end}] ends before it begins")
        if merged and begin <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return tuple((b, e) for b, e in merged)


def ranges_contain(outer: RangeSet, inner: RangeSet) -> bool:
    i = 0
    for begin, end in inner:
        while i < len(outer) and outer[i][1] < begin:
            i += 1
        if i == len(outer) or not (outer[i][0] <= begin and end <= outer[i][1]):
            return False
    return True


def ranges_subtract(a: RangeSet, b: RangeSet) -> RangeSet:
    out: list[tuple[int, int]] = []
    for begin, end in a:
        pieces = [(begin, end)]
        for b_begin, b_end in b:
            next_pieces = []
            for p_begin, p_end in pieces:
                if b_end < p_begin or b_begin > p_end:
                    next_pieces.append((p_begin, p_end))
                    continue
                if p_begin < b_begin:
                    next_pieces.append((p_begin, b_begin - 1))
                if b_end < p_end:
                    next_pieces.append((b_end + 1, p_end))
            pieces = next_pieces
        out.extend(pieces)
    return normalize_ranges(out)


def ranges_count(ranges: RangeSet) -> int:
    return sum(end - begin + 1 for begin, end in ranges)


def format_ranges(ranges: RangeSet) -> str:
    return "[" + ",".join(f"{b}-{e}" for b, e in ranges) + "]"


# --- Resources ------------------------------------------------------------------------------


class Resources:
    """An immutable bag of resources keyed by (name, role)."""

    __slots__ = ("_scalars", "_ranges", "_hash")

    def __init__(
        self,
        scalars: Mapping[Key, float] | None = None,
        ranges: Mapping[Key, Iterable[tuple[int, int]]] | None = None,
    ) -> None:
        clean_scalars: dict[Key, float] = {}
        for (name, role), value in (scalars or {}).items():
            _check_scalar(name, value)
            value = _round(value)
            if value > 0:
                clean_scalars[(name, role or UNRESERVED)] = value
        clean_ranges: dict[Key, RangeSet] = {}
        for (name, role), given in (ranges or {}).items():
            if name not in RANGE_NAMES:
                raise ResourceError(f"{name!r} is not a range resource (known: ports)")
            normalized = normalize_ranges(given)
            if normalized:
                clean_ranges[(name, role or UNRESERVED)] = normalized
        self._scalars = clean_scalars
        self._ranges = clean_ranges
        self._hash: int | None = None

    # construction -----------------------------------------------------------------------

    @classmethod
    def of(cls, role: str = UNRESERVED, **amounts: float) -> Resources:
        """Resources.of(cpus=1, mem=128): scalars in one role, handy in code and tests."""
        return cls({(name, role): value for name, value in amounts.items()})

    @classmethod
    def parse(cls, text: str, default_role: str = UNRESERVED) -> Resources:
        """Parses Mesos' syntax: `cpus:4;mem:4096;ports:[31000-32000];cpus(analytics):2`."""
        scalars: dict[Key, float] = {}
        ranges: dict[Key, list[tuple[int, int]]] = {}
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            match = _ITEM.fullmatch(part)
            if not match:
                raise ResourceError(
                    f"cannot parse {part!r}: write name:value, name(role):value or "
                    "ports:[begin-end,...], e.g. 'cpus:4;mem:4096;ports:[31000-32000]'"
                )
            name, role, value = match.group("name"), match.group("role"), match.group("value")
            role = role or default_role
            if name not in KNOWN_NAMES:
                known = ", ".join(sorted(KNOWN_NAMES))
                raise ResourceError(f"unknown resource {name!r} in {part!r} (known: {known})")
            if (name, role) in scalars or (name, role) in ranges:
                # Summing 'cpus:2;cpus:3' silently hid a typo: say which one is meant.
                which = name if role == default_role else f"{name}({role})"
                raise ResourceError(f"{which} is given twice in {text!r}; give it once")
            if name in RANGE_NAMES:
                ranges.setdefault((name, role), []).extend(_parse_ranges(part, value))
            else:
                try:
                    amount = float(value)
                except ValueError:
                    raise ResourceError(f"{part!r}: {name} takes a number, got {value!r}") from None
                _check_given_scalar(name, amount)
                scalars[(name, role)] = scalars.get((name, role), 0.0) + amount
        return cls(scalars, ranges)

    @classmethod
    def from_proto(cls, resources: Iterable[common_pb2.Resource]) -> Resources:
        """Builds from the wire, rejecting unknown names and negative or NaN scalars."""
        scalars: dict[Key, float] = {}
        ranges: dict[Key, list[tuple[int, int]]] = {}
        for r in resources:
            role = r.role or UNRESERVED
            if r.name not in KNOWN_NAMES:
                raise ResourceError(
                    f"unknown resource {r.name!r} (known: {', '.join(sorted(KNOWN_NAMES))})"
                )
            if r.name in RANGE_NAMES:
                if r.type != common_pb2.Resource.RANGES:
                    raise ResourceError(f"{r.name} must be given as ranges")
                ranges.setdefault((r.name, role), []).extend((x.begin, x.end) for x in r.ranges)
            else:
                if r.type != common_pb2.Resource.SCALAR:
                    raise ResourceError(f"{r.name} must be given as a scalar")
                _check_given_scalar(r.name, r.scalar)
                scalars[(r.name, role)] = scalars.get((r.name, role), 0.0) + r.scalar
        return cls(scalars, ranges)

    def to_proto(self) -> list[common_pb2.Resource]:
        out = []
        for (name, role), value in sorted(self._scalars.items()):
            out.append(
                common_pb2.Resource(
                    name=name, type=common_pb2.Resource.SCALAR, scalar=value, role=role
                )
            )
        for (name, role), spans in sorted(self._ranges.items()):
            out.append(
                common_pb2.Resource(
                    name=name,
                    type=common_pb2.Resource.RANGES,
                    role=role,
                    ranges=[common_pb2.Range(begin=b, end=e) for b, e in spans],
                )
            )
        return out

    def fill(self, field) -> None:
        """Appends what to_proto() gives to a message's repeated Resource `field` (e.g.
        TaskInfo.resources), made in place: a list of messages passed to a constructor is
        copied into it, which cost a packed task as much again."""
        add = field.add
        for (name, role), value in sorted(self._scalars.items()):
            add(name=name, type=common_pb2.Resource.SCALAR, scalar=value, role=role)
        for (name, role), spans in sorted(self._ranges.items()):
            ranges = add(name=name, type=common_pb2.Resource.RANGES, role=role).ranges
            for begin, end in spans:
                ranges.add(begin=begin, end=end)

    # reading ----------------------------------------------------------------------------

    @property
    def scalars(self) -> Mapping[Key, float]:
        return self._scalars

    @property
    def ranges(self) -> Mapping[Key, RangeSet]:
        return self._ranges

    def scalar(self, name: str, role: str | None = None) -> float:
        """The amount of a scalar, summed over roles unless one is named."""
        if role is not None:
            return self._scalars.get((name, role), 0.0)
        return _round(sum(v for (n, _), v in self._scalars.items() if n == name))

    def port_ranges(self, role: str | None = None) -> RangeSet:
        if role is not None:
            return self._ranges.get(("ports", role), ())
        return normalize_ranges(
            r for (n, _), rs in self._ranges.items() if n == "ports" for r in rs
        )

    def roles(self) -> set[str]:
        return {role for _, role in self._scalars} | {role for _, role in self._ranges}

    def is_empty(self) -> bool:
        return not self._scalars and not self._ranges

    def __bool__(self) -> bool:  # not via is_empty(): the allocator asks it per agent per cycle
        return bool(self._scalars or self._ranges)

    def reserved(self, role: str) -> Resources:
        return self._filter(lambda r: r == role)

    def unreserved(self) -> Resources:
        return self._filter(lambda r: r == UNRESERVED)

    def allocatable_to(self, role: str) -> Resources:
        """What a framework in `role` may be offered: unreserved plus reserved for `role`."""
        return self._filter(lambda r: r in (UNRESERVED, role))

    def _filter(self, keep) -> Resources:
        return Resources(
            {k: v for k, v in self._scalars.items() if keep(k[1])},
            {k: v for k, v in self._ranges.items() if keep(k[1])},
        )

    # arithmetic -------------------------------------------------------------------------

    @classmethod
    def _of_checked(cls, scalars: dict[Key, float], ranges: dict[Key, RangeSet]) -> Resources:
        """A value made of parts that are already as __init__ leaves them (checked, rounded,
        positive, normalized): the results of arithmetic on values, which the allocator makes
        several of per task and need not be checked again (a quarter of the cost)."""
        made = object.__new__(cls)
        made._scalars, made._ranges, made._hash = scalars, ranges, None
        return made

    def __add__(self, other: Resources) -> Resources:
        if not other:
            return self  # immutable: sharing is safe
        scalars = dict(self._scalars)
        for key, value in other._scalars.items():
            scalars[key] = _round(scalars.get(key, 0.0) + value)
        ranges = self._ranges  # never changed once made: shared when other adds no ranges
        if other._ranges:
            ranges = dict(ranges)
            for key, spans in other._ranges.items():
                ranges[key] = normalize_ranges((*ranges.get(key, ()), *spans))
        return Resources._of_checked(scalars, ranges)

    def __sub__(self, other: Resources) -> Resources:
        """Subtracts `other`, which must be contained in self (see `contains`)."""
        if not other:
            return self  # immutable: sharing is safe, and saves a copy per idle agent
        if not self.contains(other):
            raise ResourceError(f"cannot subtract {other} from {self}: not contained")
        scalars = dict(self._scalars)
        for key, value in other._scalars.items():
            left = _round(scalars[key] - value)
            if left > 0:
                scalars[key] = left
            else:
                del scalars[key]  # all of it (contains allows 1e-9 over: never below 0)
        ranges = self._ranges
        if other._ranges:
            ranges = dict(ranges)
            for key, spans in other._ranges.items():
                left_spans = ranges_subtract(ranges[key], spans)
                if left_spans:
                    ranges[key] = left_spans
                else:
                    del ranges[key]
        return Resources._of_checked(scalars, ranges)

    def contains(self, other: Resources) -> bool:
        """True when every (name, role) amount of `other` is available in self."""
        for key, value in other._scalars.items():
            if self._scalars.get(key, 0.0) + 1e-9 < value:
                return False
        for key, spans in other._ranges.items():
            if not ranges_contain(self._ranges.get(key, ()), spans):
                return False
        return True

    # comparison and display ---------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True  # agents of one shape share one (master/agents.py): the common case
        if not isinstance(other, Resources):
            return NotImplemented
        return self._scalars == other._scalars and self._ranges == other._ranges

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((frozenset(self._scalars.items()), frozenset(self._ranges.items())))
        return self._hash

    def __iter__(self) -> Iterator[Key]:
        yield from self._scalars
        yield from self._ranges

    def format(self) -> str:
        """The command-line syntax, parseable by `Resources.parse`."""
        parts = []
        for (name, role), value in sorted(self._scalars.items()):
            label = name if role == UNRESERVED else f"{name}({role})"
            parts.append(f"{label}:{value:g}")
        for (name, role), spans in sorted(self._ranges.items()):
            label = name if role == UNRESERVED else f"{name}({role})"
            parts.append(f"{label}:{format_ranges(spans)}")
        return ";".join(parts)

    def __str__(self) -> str:
        return self.format() or "(none)"

    def __repr__(self) -> str:
        return f"Resources({self.format()!r})"


EMPTY = Resources()

_ITEM = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?:\((?P<role>[^()\s;:]+)\))?\s*:\s*(?P<value>.+)"
)


def _parse_ranges(part: str, value: str) -> list[tuple[int, int]]:
    value = value.strip()
    if not (value.startswith("[") and value.endswith("]")):
        raise ResourceError(f"{part!r}: ports take ranges like [31000-32000,33000-33010]")
    out = []
    for item in value[1:-1].split(","):
        item = item.strip()
        if not item:
            continue
        bounds = item.split("-")
        try:
            if len(bounds) == 1:
                begin = end = int(bounds[0])
            elif len(bounds) == 2:
                begin, end = int(bounds[0]), int(bounds[1])
            else:
                raise ValueError
        except ValueError:
            raise ResourceError(f"{part!r}: {item!r} is not a range like 31000-32000") from None
        if begin < 0 or end > 65535 or begin > end:
            raise ResourceError(f"{part!r}: range {item} must satisfy 0 <= begin <= end <= 65535")
        out.append((begin, end))
    return out


def _check_scalar(name: str, value: float) -> None:
    if name not in SCALAR_NAMES:
        raise ResourceError(
            f"unknown scalar resource {name!r} (known: {', '.join(sorted(SCALAR_NAMES))})"
        )
    if math.isnan(value) or math.isinf(value):
        raise ResourceError(f"{name} must be a finite number, got {value}")
    if value < 0:
        raise ResourceError(f"{name} must not be negative, got {value:g}")


def _check_given_scalar(name: str, value: float) -> None:
    """_check_scalar for an amount someone wrote (a string or the wire): also not absurdly big.
    Sums made here (a cluster's total) may exceed it."""
    _check_scalar(name, value)
    if value > MAX_SCALAR:
        raise ResourceError(f"{name} must be at most {MAX_SCALAR:g}, got {value:g}")
