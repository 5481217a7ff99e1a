"""common/settings.py: a field declared once gives its check, its flag and its mapping."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

import pytest

from agora.common.settings import (
    Flag,
    Number,
    add_flags,
    check_settings,
    flag_settings,
    in_flag_words,
    port_rule,
    setting,
)


@dataclass
class Knobs:
    timeout_seconds: float = setting(
        30.0,
        Number(above=0, unit="seconds"),
        Flag("--timeout", "give up after this long (default {default})"),
    )
    workers: int = setting(4, Number(at_least=1, whole=True), Flag("--workers", "how many"))
    port: int | None = setting(None, port_rule(optional=True), Flag("--port", "where"))
    limit_bytes: int = setting(
        8 * 1024 * 1024,
        Number(at_least=1, whole=True),
        Flag("--limit-mb", "the bound (default {default})", parse=float, scale=1024 * 1024),
    )
    idle_seconds: float | None = setting(
        60.0,
        Number(above=0, unit="seconds", optional=True),
        Flag("--idle", "(default {default}; 0 = never)", zero_is_none=True),
    )
    checks: bool = setting(True, None, Flag("--no-checks", "skip the checks", negate=True))
    mode: bool = setting(
        True, None, Flag("--mode", "fast or safe", choices={"fast": True, "safe": False})
    )
    tags: tuple[str, ...] = setting(
        (), None, Flag("--tag", "repeat", action="append", to_field=tuple)
    )
    ratio: float = setting(0.5, Number(at_least=0, at_most=1, noun="a fraction"))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="knobs", exit_on_error=False)
    add_flags(p, Knobs)
    return p


def test_the_flags_defaults_give_the_dataclass_defaults():
    args = parser().parse_args([])
    assert Knobs(**flag_settings(args, Knobs)) == Knobs()


def test_each_flag_maps_to_its_field():
    args = parser().parse_args(
        ["--timeout", "2m", "--workers", "8", "--port", "0", "--limit-mb", "1.5", "--idle", "0"]
        + ["--no-checks", "--mode", "safe", "--tag", "a", "--tag", "b"]
    )
    assert Knobs(**flag_settings(args, Knobs)) == Knobs(
        timeout_seconds=120.0,
        workers=8,
        port=0,
        limit_bytes=1572864,
        idle_seconds=None,
        checks=False,
        mode=False,
        tags=("a", "b"),
    )


def test_help_shows_the_default_as_a_person_writes_it():
    text = parser().format_help()
    assert "give up after this long (default 30)" in text
    assert "the bound (default 8)" in text


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--timeout", "-3"], "must be a positive number of seconds, got -3.0"),
        (["--timeout", "nan"], "must be a positive number of seconds, got nan"),
        (["--timeout", "soon"], "'soon' is not a duration"),
        (["--workers", "0"], "must be at least 1, got 0"),
        (["--workers", "2.5"], "'2.5' is not a whole number"),
        (["--port", "70000"], "must be a whole number between 0 and 65535"),
        (["--idle", "-1"], "must be a positive number of seconds (or None), got -1.0"),
    ],
)
def test_a_bad_flag_value_is_refused_by_its_flag(argv, says):
    with pytest.raises(argparse.ArgumentError, match=re.escape(says)) as caught:
        parser().parse_args(argv)
    assert caught.value.argument_name == argv[0]


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("timeout_seconds", float("nan"), "timeout_seconds must be a positive number of seconds"),
        ("timeout_seconds", -3, "timeout_seconds must be a positive number of seconds, got -3"),
        ("timeout_seconds", "5", "timeout_seconds must be a positive number of seconds, got '5'"),
        ("timeout_seconds", float("inf"), "seconds, got inf"),
        ("timeout_seconds", True, "timeout_seconds must be a positive number of seconds, got True"),
        ("workers", 2.0, "workers must be a whole number, at least 1, got 2.0"),
        ("workers", -7, "workers must be at least 1, got -7"),
        ("port", 65536, "port must be a whole number between 0 and 65535 (or None), got 65536"),
        ("ratio", 1.5, "ratio must be a fraction between 0 and 1, got 1.5"),
    ],
)
def test_check_settings_names_the_field_what_to_give_and_what_was_given(field, value, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        check_settings(Knobs(**{field: value}))


def test_none_is_accepted_only_where_declared():
    check_settings(Knobs(port=None, idle_seconds=None))
    with pytest.raises(ValueError, match="workers must be a whole number, at least 1, got None"):
        check_settings(Knobs(workers=None))  # type: ignore[arg-type]


def test_a_config_error_reads_in_the_flags_names():
    message = "timeout_seconds (1) must exceed idle_seconds (2); ratio is fine"
    assert in_flag_words(message, Knobs) == "--timeout (1) must exceed --idle (2); ratio is fine"
