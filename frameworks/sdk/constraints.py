"""Placement constraints, Marathon-style: [field, OPERATOR, value] over hostname or attributes,
for any framework: the services framework places app instances with them, the batch framework
job instances.

Pure: `Constraint.parse` validates one (an unknown operator is a ConstraintError naming the
known ones), and `violation()` says why an agent cannot take one more instance given where the
app's instances already are, or None when it can.

LIKE and UNLIKE patterns are RE2 expressions (Python's `re` syntax without backreferences or
lookaround), matched by RE2 in time linear in the attribute's length: a pattern such as
`(?:.?){56}X` takes Python's backtracking `re` about a minute on a 60-character value, and the
services framework shares its event loop with the master in `agora local`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import re2

OPERATORS = ("UNIQUE", "CLUSTER", "GROUP_BY", "LIKE", "UNLIKE", "MAX_PER")


# Longest LIKE/UNLIKE pattern accepted: room for any real host or rack pattern.
MAX_PATTERN_LENGTH = 1000
# The budget of one pattern. Length alone bounds nothing: `(?:\pL){300}N` is 12 characters
# and compiles to 358,805 RE2 instructions (0.11 s, about 4 MB); 40 of them in one 1.4 KB app
# held the services daemon 4 s and 165 MB. RE2 stops compiling past PATTERN_MAX_MEM (in a few
# ms), and a compiled pattern may have at most MAX_PROGRAM_SIZE instructions: a rack or host
# pattern such as `rack-(a|b)[0-9]+` has about 20.
PATTERN_MAX_MEM = 256 * 1024
MAX_PROGRAM_SIZE = 5000
# The budget of one app: LIKE/UNLIKE patterns, and their instructions together.
MAX_PATTERNS_PER_APP = 16
MAX_PROGRAM_SIZE_PER_APP = 20_000


class ConstraintError(ValueError):
    """A constraint that cannot be used; the message says what to write instead."""


@functools.lru_cache(maxsize=1024)
def _pattern(value: str) -> re2._Regexp:
    """The compiled pattern (compiled once: placement checks it per agent and instance)."""
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the caller's error, reported to them, not logged
    options.max_mem = PATTERN_MAX_MEM
    return re2.compile(value, options)


def check_pattern_budget(constraints: Iterable[Constraint], where: str) -> None:
    """ConstraintError unless the LIKE/UNLIKE patterns of one app fit its budget (each pattern
    was checked alone by `Constraint.parse`)."""
    patterns = [c.value for c in constraints if c.operator in ("LIKE", "UNLIKE")]
    if len(patterns) > MAX_PATTERNS_PER_APP:
        raise ConstraintError(
            f"{where}: {len(patterns)} LIKE/UNLIKE constraints; at most "
            f"{MAX_PATTERNS_PER_APP} (join alternatives into one pattern with |)"
        )
    size = sum(_pattern(p).programsize for p in patterns)
    if size > MAX_PROGRAM_SIZE_PER_APP:
        raise ConstraintError(
            f"{where}: its LIKE/UNLIKE patterns compile to {size} instructions together; at "
            f"most {MAX_PROGRAM_SIZE_PER_APP}: simplify them"
        )


@dataclass(frozen=True)
class AgentFacts:
    """What constraints look at on an agent: its hostname and attributes."""

    agent_id: str
    hostname: str
    attributes: Mapping[str, str] = field(default_factory=dict)

    def value(self, name: str) -> str | None:
        if name == "hostname":
            return self.hostname
        return self.attributes.get(name)


@dataclass(frozen=True)
class Constraint:
    field: str
    operator: str
    value: str = ""

    @classmethod
    def parse(cls, field_name: str, operator: str, value: str = "") -> Constraint:
        field_name = (field_name or "").strip()
        op = (operator or "").strip().upper()
        value = "" if value is None else str(value)
        where = f"constraint [{field_name}, {operator}{', ' + value if value else ''}]"
        if not field_name:
            raise ConstraintError(f"{where}: the field is empty (use hostname or an attribute)")
        if op not in OPERATORS:
            raise ConstraintError(
                f"{where}: unknown operator {operator!r}; use one of {', '.join(OPERATORS)}"
            )
        if op in ("CLUSTER", "LIKE", "UNLIKE") and not value:
            raise ConstraintError(f"{where}: {op} needs a value")
        if op in ("LIKE", "UNLIKE"):
            if len(value) > MAX_PATTERN_LENGTH:
                raise ConstraintError(
                    f"constraint [{field_name}, {op}]: the pattern has {len(value)} characters; "
                    f"the limit is {MAX_PATTERN_LENGTH}"
                )
            try:
                compiled = _pattern(value)
            except re2.error as e:
                reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else e
                if "too large" in str(reason):
                    raise ConstraintError(
                        f"{where}: the pattern is too large for RE2's budget "
                        f"({PATTERN_MAX_MEM // 1024} KB compiled): simplify it (a counted "
                        "repetition such as {300} multiplies what follows)"
                    ) from None
                raise ConstraintError(
                    f"{where}: bad regular expression (RE2 syntax: no backreferences or "
                    f"lookaround): {reason}"
                ) from None
            if compiled.programsize > MAX_PROGRAM_SIZE:
                raise ConstraintError(
                    f"{where}: the pattern compiles to {compiled.programsize} instructions; "
                    f"at most {MAX_PROGRAM_SIZE}: simplify it"
                )
        if op == "MAX_PER" or (op == "GROUP_BY" and value):
            if not value.isdigit() or int(value) < 1:
                raise ConstraintError(f"{where}: {op} needs a whole number >= 1")
        if op == "UNIQUE" and value:
            raise ConstraintError(f"{where}: UNIQUE takes no value")
        return cls(field_name, op, value)

    def describe(self) -> str:
        return f"[{self.field}, {self.operator}{', ' + self.value if self.value else ''}]"

    def violation(
        self, agent: AgentFacts, placed: Sequence[AgentFacts], known_values: Iterable[str] = ()
    ) -> str | None:
        """Why `agent` cannot take one more instance, or None if it can.

        `placed` are the agents of the app's instances (one entry per instance); `known_values`
        are the field's values over all agents (for GROUP_BY's evenness).
        """
        mine = agent.value(self.field)
        if mine is None:
            if self.operator == "UNLIKE":
                return None
            return f"{self.describe()}: agent {agent.hostname} has no {self.field!r} attribute"
        counts = Counter(a.value(self.field) for a in placed)
        if self.operator == "UNIQUE":
            if counts[mine] >= 1:
                return f"{self.describe()}: {self.field}={mine} already runs an instance"
        elif self.operator == "MAX_PER":
            if counts[mine] >= int(self.value):
                return (
                    f"{self.describe()}: {self.field}={mine} already runs "
                    f"{counts[mine]} instance(s)"
                )
        elif self.operator == "CLUSTER":
            if mine != self.value:
                return f"{self.describe()}: {self.field}={mine}"
        elif self.operator == "LIKE":
            if not _pattern(self.value).fullmatch(mine):
                return f"{self.describe()}: {self.field}={mine} does not match"
        elif self.operator == "UNLIKE":
            if _pattern(self.value).fullmatch(mine):
                return f"{self.describe()}: {self.field}={mine} matches"
        elif self.operator == "GROUP_BY":
            values = set(known_values) | {mine} | {v for v in counts if v is not None}
            least = min(counts[v] for v in values)
            if self.value and len(values) < int(self.value):
                least = 0  # groups not seen yet count as empty
            if counts[mine] > least:
                return (
                    f"{self.describe()}: {self.field}={mine} has {counts[mine]} instance(s), "
                    f"another value has {least}"
                )
        return None


def first_violation(
    constraints: Sequence[Constraint],
    agent: AgentFacts,
    placed: Sequence[AgentFacts],
    known_values: Mapping[str, set[str]] | None = None,
) -> str | None:
    """The first constraint `agent` breaks for one more instance, or None."""
    for constraint in constraints:
        values = (known_values or {}).get(constraint.field, set())
        reason = constraint.violation(agent, placed, values)
        if reason is not None:
            return reason
    return None


def known_values(agents: Iterable[AgentFacts], fields: Iterable[str]) -> dict[str, set[str]]:
    """Each field's values over the agents (for GROUP_BY)."""
    agents = list(agents)
    out: dict[str, set[str]] = {}
    for name in fields:
        out[name] = {v for a in agents if (v := a.value(name)) is not None}
    return out
