"""One reading of durations for the command line's flags and the dashboard's queries."""

from __future__ import annotations

import pytest

from agora.common.durations import DurationError, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [("90", 90), ("2.5", 2.5), ("90s", 90), ("10m", 600), ("1h30m", 5400), (" 2D ", 172800)],
)
def test_durations_read_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "1x", "h1", "-5s", "1h 30m"])
def test_what_is_not_a_duration_says_what_to_write(text):
    with pytest.raises(DurationError, match="write e.g. 90s, 10m, 1h30m or 2d"):
        parse_duration(text)


def test_the_command_line_and_the_dashboard_read_durations_alike():
    import argparse

    from agora.cli.options import duration as flag
    from agora.master.dashboard.batch import duration as query
    from agora.master.dashboard.calls import ApiError

    assert flag("1h30m") == query("1h30m") == 5400
    with pytest.raises(argparse.ArgumentTypeError) as refused_flag:
        flag("soon")
    with pytest.raises(ApiError) as refused_query:
        query("soon")
    assert refused_query.value.status == 400
    assert str(refused_flag.value) == str(refused_query.value)
