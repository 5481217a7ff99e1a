"""The failover experiment's checks, over hand-made measurements (no cluster)."""

from __future__ import annotations

import pytest

from agora.experiments.checks import Check
from agora.experiments.failover_checks import (
    FailoverRun,
    FaultTimes,
    judge,
    lost_tasks,
    metrics,
    runs_twice,
    samples,
)
from agora.v1 import common_pb2

# A kill at t=100: elected at 101, agents back at 102.5, framework back at 101.5 and offered
# at 101.7; the killed master listened again at 100.4.
KILL = FaultTimes(
    at=100.0,
    elected=101.0,
    listening=100.4,
    agents_back=102.5,
    framework_back=101.5,
    first_offer=101.7,
)


def test_each_fault_becomes_seconds_after_it_and_back_is_the_later_of_agents_and_framework():
    (row,) = samples(FailoverRun(masters=3, fault="kill", faults=[KILL]))
    assert row == pytest.approx(
        {
            "kill": 1,
            "elected": 1.0,
            "agents_back": 2.5,
            "framework_back": 1.5,
            "first_offer": 1.7,
            "back": 2.5,
        }
    )


def test_back_after_listening_is_reported_only_for_a_single_master():
    (row,) = samples(FailoverRun(masters=1, fault="kill", faults=[KILL]))
    assert row["back_after_listening"] == pytest.approx(2.1)
    assert metrics(FailoverRun(masters=1, fault="kill"))[-1] == "back_after_listening"
    assert "back_after_listening" not in metrics(FailoverRun(masters=3, fault="kill"))


def test_a_pause_reports_how_soon_the_resumed_master_refused():
    pause = FaultTimes(**{**KILL.__dict__, "resumed_to_refusing": 0.03})
    (row,) = samples(FailoverRun(masters=3, fault="pause", faults=[pause]))
    assert row["resumed_to_refusing"] == 0.03
    assert metrics(FailoverRun(masters=3, fault="pause"))[-1] == "resumed_to_refusing"


def test_a_task_with_two_markers_ran_twice():
    assert runs_twice(["fo-1.100", "fo-2.101", "fo-2.102", "fo-3.103"]) == ["fo-2"]
    assert runs_twice([]) == []


def test_lost_is_ended_badly_or_never_heard_of_again_but_not_dropped_and_relaunched():
    states = {
        "finished": common_pb2.TASK_FINISHED,
        "failed": common_pb2.TASK_FAILED,  # ended, by its own command: not lost
        "lost": common_pb2.TASK_LOST,
        "gone": common_pb2.TASK_GONE,
        "dropped": common_pb2.TASK_DROPPED,  # TASK_UNKNOWN on reconciliation, relaunched
        "silent": common_pb2.TASK_STAGING,  # never heard of again
        "running": common_pb2.TASK_RUNNING,
    }
    assert lost_tasks(states) == ["gone", "lost", "running", "silent"]


def test_the_targets_of_a_clean_run_all_pass_in_the_order_results_json_lists_them():
    # Two kills: back after 2.5 s and 1.0 s, so p50 1.75 s and p99 2.485 s.
    fast = FaultTimes(**{**KILL.__dict__, "agents_back": 101.0, "framework_back": 100.9})
    run = FailoverRun(
        masters=3,
        fault="kill",
        faults=[KILL, fast],
        states={"a": common_pb2.TASK_FINISHED},
        markers=["a.1"],
        framework_ids=["fw", "fw", "fw"],
    )
    verdict = judge(run)
    assert [c.name for c in verdict.checks] == [
        "kill -> all back p50",
        "kill -> all back p99",
        "tasks lost",
        "tasks run twice",
    ]
    assert verdict.checks[0].figure == pytest.approx(1.75)
    assert all(c.met for c in verdict.checks), [c.line() for c in verdict.checks]
    assert verdict.kept_its_id and verdict.lost == [] and verdict.ran_twice == []


def test_a_slow_return_a_lost_task_and_a_new_framework_id_fail():
    slow = FaultTimes(**{**KILL.__dict__, "agents_back": 105.0, "resumed_to_refusing": 0.1})
    run = FailoverRun(
        masters=3,
        fault="pause",
        faults=[slow],
        states={"a": common_pb2.TASK_LOST},
        markers=["a.1", "a.2"],
        from_deposed=2,
        framework_ids=["fw", "other"],
    )
    verdict = judge(run)
    failed = {c.name for c in verdict.checks if not c.met}
    assert failed == {
        "kill -> all back p50",
        "kill -> all back p99",
        "events from a deposed leader",
        "tasks lost",
        "tasks run twice",
    }
    assert not verdict.kept_its_id


def test_a_single_master_is_judged_from_listening_again():
    run = FailoverRun(masters=1, fault="kill", faults=[KILL], framework_ids=["fw"])
    (first, *_) = judge(run).checks
    assert first.name == "listening again -> all back (max)"
    assert first.figure == pytest.approx(2.1) and first.met is False


def test_a_check_reads_as_one_line():
    assert (
        Check("tasks lost", 0.0, 0, "tasks").line() == "tasks lost: 0 tasks (limit <= 0 tasks) pass"
    )
    assert Check("kills", 3, 20, "kills", at_most=False).line().endswith("FAIL")
    assert Check("p50", None, 2.0, "s").met is None
