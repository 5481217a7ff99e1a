"""Config fields declared once: bounds, flag and help in the dataclass field's metadata.

A daemon's config dataclass declares each field with `setting()`:

    agent_timeout_seconds: float = setting(
        30.0,
        Number(above=0, unit="seconds"),
        Flag("--agent-timeout", "remove an agent silent this long (default {default})"),
    )

and the rest is derived from that one declaration, so a name, a default, a bound and a help
text cannot drift apart: `check_settings(config)` checks every declared `Number` (one message
style for every config: the field, what to give, what was given); `add_flags(parser, Config)`
adds the flags, each refusing a bad value at parse time under its own name; `flag_settings(args,
Config)` maps the parsed flags back to field values; `in_flag_words` rewrites a config's
ValueError in the flags' names for the command line.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from typing import Any

__all__ = [
    "AT_LEAST_ONE",
    "MB",
    "SECONDS",
    "SECONDS_OR_ZERO",
    "Flag",
    "Number",
    "add_flags",
    "check_number",
    "check_settings",
    "flag_settings",
    "in_flag_words",
    "port_rule",
    "setting",
]


@dataclasses.dataclass(frozen=True)
class Number:
    """What a numeric field accepts: a finite int or float (never a bool or a string) within
    these bounds. `above` is strict, `at_least` and `at_most` are not; `whole`: an int only;
    `optional`: None is accepted too (the field's "off"); `unit` is said in the messages;
    `noun` replaces "a number" ("a fraction")."""

    above: float | None = None
    at_least: float | None = None
    at_most: float | None = None
    whole: bool = False
    optional: bool = False
    unit: str = ""
    noun: str = ""

    def wanted(self) -> str:
        """What to give, e.g. "a positive number of seconds" or "at least 1"."""
        noun = self.noun or _noun(self)
        unit = f" {self.unit}" if self.unit else ""
        low, high = self.at_least, self.at_most
        if self.above is not None:
            if self.above == 0 and high is None:
                return f"a positive {noun.removeprefix('a ')}" + (f" of{unit}" if unit else "")
            return f"more than {_shown_number(self.above)}{unit}"
        if low is not None and high is not None:
            return f"{noun} between {_shown_number(low)} and {_shown_number(high)}{unit}"
        if low is not None:
            shown = _shown_number(low)
            return f"{shown} or more{unit}" if unit else f"at least {shown}"
        if high is not None:
            return f"at most {_shown_number(high)}{unit}"
        return noun + (f" of{unit}" if unit else "")

    def refusal(self, value: object) -> str | None:
        """Why `value` is refused ("must be ..., got ..."), or None when it is fine."""
        if value is None and self.optional:
            return None
        wanted = self.wanted()
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (self.whole and not isinstance(value, int))
        ):
            noun = self.noun or _noun(self)
            if noun.removeprefix("a ") not in wanted:  # "at least 1": say what kind, too
                wanted = f"{noun}, {wanted}"
        elif (
            math.isfinite(value)
            and (self.above is None or value > self.above)
            and (self.at_least is None or value >= self.at_least)
            and (self.at_most is None or value <= self.at_most)
        ):
            return None
        return f"must be {wanted}{' (or None)' if self.optional else ''}, got {value!r}"


def _shown_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _noun(rule: Number) -> str:
    return "a whole number" if rule.whole else "a number"


# Rules that every daemon's config uses.
MB = 1024 * 1024
SECONDS = Number(above=0, unit="seconds")
SECONDS_OR_ZERO = Number(at_least=0, unit="seconds")
AT_LEAST_ONE = Number(at_least=1, whole=True)


def port_rule(optional: bool = False) -> Number:
    """A TCP port to listen on, 0 picking a free one."""
    return Number(at_least=0, at_most=65535, whole=True, optional=optional)


def check_number(name: str, value: object, rule: Number) -> None:
    """Raises ValueError naming the field, what to give and what was given."""
    why = rule.refusal(value)
    if why is not None:
        raise ValueError(f"{name} {why}")


def check_settings(config: Any) -> None:
    """Checks each field of a config dataclass that declares a Number, in declaration order."""
    for f in dataclasses.fields(config):
        rule = f.metadata.get("number")
        if rule is not None:
            check_number(f.name, getattr(config, f.name), rule)


_LIBRARY_DEFAULT = object()  # a flag's default is its field's unless it says otherwise


@dataclasses.dataclass(frozen=True)
class Flag:
    """A field's command-line flag. `help` may say `{default}`: the flag's default, written as
    a person would (5, 0.002, 50000). Without `parse`, a Number field's flag reads a number (a
    duration such as 90s or 10m for seconds) and checks its bounds; any other reads a string.

    `scale`: the field holds the flag's value times this (bytes from --max-log-mb). `negate`:
    a store_true flag that turns a True field off (--no-disk-limit). `zero_is_none`: 0 on the
    command line is the field's None (off, as Mesos writes it). `choices`: the words the flag
    takes, or a mapping of them to the field's values. `flag_default`: where the command line's
    default differs from the library's (the command line decides it later). `to_field`: the
    field's value from the flag's (e.g. dict of repeated ROLE=SECONDS pairs)."""

    name: str
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | Mapping[str, Any] | None = None
    action: Any = None
    scale: int = 1
    negate: bool = False
    zero_is_none: bool = False
    flag_default: Any = _LIBRARY_DEFAULT
    to_field: Callable[[Any], Any] | None = None

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")


def setting(
    default: Any = MISSING,
    number: Number | None = None,
    flag: Flag | None = None,
    *,
    default_factory: Any = MISSING,
) -> Any:
    """A dataclass field carrying its Number and its Flag (either may be None)."""
    metadata = {"number": number, "flag": flag}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _flag_default(f: dataclasses.Field, flag: Flag) -> Any:
    if flag.flag_default is not _LIBRARY_DEFAULT:
        return flag.flag_default
    if flag.action == "append":
        return []
    default = _field_default(f)
    if flag.negate:
        return not default
    if isinstance(flag.choices, Mapping):
        return next(word for word, value in flag.choices.items() if value == default)
    if default is None:
        return None
    if flag.scale != 1:
        whole = isinstance(default, int) and default % flag.scale == 0
        return default // flag.scale if whole else default / flag.scale
    return default


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _number_reader(flag: Flag, rule: Number) -> Callable[[str], Any]:
    def read(text: str) -> Any:
        try:
            value: Any = int(text) if rule.whole else float(text)
        except ValueError:
            if rule.unit != "seconds":
                raise ValueError(f"{text!r} is not {rule.noun or _noun(rule)}") from None
            from agora.common.durations import parse_duration

            value = parse_duration(text)  # 90s, 10m, 1h30m
        if flag.zero_is_none and value == 0:
            return value
        why = rule.refusal(value)
        if why is not None:
            raise ValueError(why)
        return value

    return read


def _argparse_type(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse shows an ArgumentTypeError's words; a plain ValueError it would hide."""
    import argparse

    def parse(text: str) -> Any:
        try:
            return read(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = getattr(read, "__name__", "value")
    return parse


def add_flags(parser: Any, config_type: type, skip: tuple[str, ...] = ()) -> None:
    """Adds the flag of every field of `config_type` that declares one (but those in `skip`),
    in declaration order, to an argparse parser or argument group."""
    for f in dataclasses.fields(config_type):
        flag: Flag | None = f.metadata.get("flag")
        if flag is None or f.name in skip:
            continue
        default = _flag_default(f, flag)
        options: dict[str, Any] = {"default": default}
        rule = f.metadata.get("number")
        read = flag.parse
        if read is None and rule is not None and flag.scale == 1:
            read = _number_reader(flag, rule)
        action = flag.action
        if action is None and isinstance(default, bool) and read is None:
            action = "store_true"
        if action is not None:
            options["action"] = action
        if read is not None:
            options["type"] = _argparse_type(read)
        if flag.choices is not None:
            options["choices"] = list(flag.choices)
        if flag.metavar is not None:
            options["metavar"] = flag.metavar
        options["help"] = flag.help.replace("{default}", _shown(default))
        parser.add_argument(flag.name, **options)


def flag_settings(args: Any, config_type: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The config's keyword arguments from parsed flags (those add_flags added)."""
    out = {}
    for f in dataclasses.fields(config_type):
        flag: Flag | None = f.metadata.get("flag")
        if flag is None or f.name in skip:
            continue
        value = getattr(args, flag.dest)
        if flag.negate:
            value = not value
        elif isinstance(flag.choices, Mapping):
            value = flag.choices[value]
        elif flag.zero_is_none and value == 0:
            value = None
        elif flag.scale != 1 and value is not None:
            value = type(_field_default(f))(value * flag.scale)
        if flag.to_field is not None:
            value = flag.to_field(value)
        out[f.name] = value
    return out


def in_flag_words(message: str, config_type: type) -> str:
    """A config's ValueError with each field that has a flag called by its flag's name."""
    names = {
        f.name: f.metadata["flag"].name
        for f in dataclasses.fields(config_type)
        if f.metadata.get("flag") is not None
    }
    if not names:
        return message
    pattern = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], message)
