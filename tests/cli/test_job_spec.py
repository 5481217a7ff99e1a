"""The job flags read into a JobSpec (cli/job_spec.py): --begin's forms, --constraint's."""

from __future__ import annotations

import argparse
import datetime as dt
import time

import pytest

from agora.cli.errors import CommandError
from agora.cli.job_spec import begin_time, parse_constraint


def test_begin_takes_a_wait_a_date_and_time_or_a_time_of_day():
    assert abs(begin_time("10m") - (time.time() + 600)) < 5
    assert begin_time("2026-12-01T09:30") == dt.datetime(2026, 12, 1, 9, 30).timestamp()
    at = begin_time("09:30")  # the next 09:30, today or tomorrow
    assert 0 < at - time.time() <= 86400
    assert dt.datetime.fromtimestamp(at).strftime("%H:%M") == "09:30"
    with pytest.raises(argparse.ArgumentTypeError, match="give a wait"):
        begin_time("next tuesday")


def test_a_constraint_is_field_operator_and_value():
    c = parse_constraint("rack:like:r1:a", "--constraint")
    assert (c.field, c.operator, c.value) == ("rack", "LIKE", "r1:a")
    assert parse_constraint("hostname:UNIQUE", "--constraint").value == ""
    with pytest.raises(CommandError, match="write FIELD:OPERATOR"):
        parse_constraint("rack", "--constraint")
