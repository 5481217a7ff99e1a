"""Attention: the time a master kept up, on which agents' silence is measured."""

from __future__ import annotations

import pytest

from agora.master.attention import SLACK, Attention


def test_ticks_on_time_count_in_full():
    a = Attention(now=100.0)
    for k in range(1, 11):
        a.tick(100.0 + 0.05 * k, step=0.05)
    assert a.now(100.5) == pytest.approx(0.5)
    assert a.unattended == pytest.approx(0.0) and a.lag == pytest.approx(0.0)


def test_a_stall_counts_only_as_long_as_a_late_tick_may_take():
    a = Attention(now=0.0)
    a.tick(0.05, step=0.05)
    a.tick(3.05, step=0.05)  # the loop stalled for 3 s
    assert a.now(3.05) == pytest.approx(0.05 + SLACK * 0.05)
    assert a.lag == pytest.approx(2.95)
    assert a.unattended == pytest.approx(3.0 - SLACK * 0.05)
    # Between ticks, time counts as the next tick will count it: never beyond the slack.
    assert a.now(10.0) == pytest.approx(a.now(3.05) + SLACK * 0.05)


def test_a_master_that_keeps_up_counts_every_second():
    a = Attention(now=0.0)
    t = 0.0
    while t < 30.0:
        t += 0.07  # late, but within the slack
        a.tick(t, step=0.05)
    assert a.now(t) == pytest.approx(t)


def test_intake_lag_is_the_median_wait_of_recent_heartbeats_capped():
    from agora.master.attention import IntakeLag

    intake = IntakeLag(cap=30.0)
    intake.observe(0.0, 100.0)  # no send time: ignored
    assert intake.lag(100.0) == 0.0
    for _ in range(100):
        intake.observe(1000.0 - 2.5, 1000.0)  # read 2.5 s after they were sent
    intake.observe(1000.0 - 900, 1000.0)  # one agent's clock far off moves the median little
    assert intake.lag(1000.0) == pytest.approx(2.5)
    for _ in range(300):
        intake.observe(1000.0 - 500, 1000.0)  # a huge apparent wait (skewed clocks): capped
    assert intake.lag(1000.0) == 30.0
    for _ in range(300):
        intake.observe(1000.0 + 5, 1000.0)  # clocks ahead of the master's: no negative lag
    assert intake.lag(1000.0) == 0.0


def test_intake_lag_forgets_what_it_read_long_ago():
    from agora.master.attention import IntakeLag

    intake = IntakeLag(cap=30.0)
    for _ in range(10):
        intake.observe(1000.0 - 4.0, 1000.0)  # a backlog, in a small cluster
    assert intake.lag(1001.0) == pytest.approx(4.0)
    assert intake.lag(1000.0 + IntakeLag.HORIZON + 1) == 0.0  # nothing read since: no evidence
    intake.observe(1020.0 - 0.1, 1020.0)  # the backlog is gone: old readings drop out at once
    assert intake.lag(1020.0) == pytest.approx(0.1)
