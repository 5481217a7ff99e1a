"""The preemption experiment's figures and checks, over hand-made runs (no cluster)."""

from __future__ import annotations

import pytest

from agora.experiments.preemption import PreemptionConfig
from agora.experiments.preemption_checks import ModeRun, checks, fewest_tasks, figures
from agora.v1 import operator_pb2

CFG = PreemptionConfig(task_cpus=0.5, sample_interval=0.5, timeout=5.0, settle=3.0)


def _preempted(task_id: str, beneficiary: str, at: float) -> operator_pb2.PreemptionSummary:
    return operator_pb2.PreemptionSummary(task_id=task_id, beneficiary=beneficiary, at=at)


def _run() -> ModeRun:
    """b arrives 10 s in and holds its guarantee at 13 s (wall 1013); c arrives at 20 s and
    is at its share at 24 s (wall 1024); the run ends at 30 s."""
    return ModeRun(
        mode="preemption",
        samples=[
            {"mode": "preemption", "t": 29.5, "role": role, "running": n}
            for role, n in (("a", 4), ("b", 4), ("c", 8))
        ],
        first_running={"a-1": 1000.0, "a-2": 1005.0},
        preempted=[
            _preempted("a-1", "b", 1012.0),  # 12 s of 0.5 cpu lost
            _preempted("a-2", "b", 1013.2),  # within a sample of b's convergence: not after
            _preempted("a-3", "c", 1023.0),  # never seen running: no work lost
        ],
        ended_at=30.0,
        b_arrived_at=10.0,
        b_reached_at=13.0,
        b_reached_wall=1013.0,
        c_arrived_at=20.0,
        c_reached_at=24.0,
        c_reached_wall=1024.0,
        launched=20,
    )


def test_the_figures_of_a_run_that_converged():
    f = figures(CFG, _run())
    assert f["to_guarantee_seconds"] == 3.0 and f["c_to_share_seconds"] == 4.0
    assert (f["preempted"], f["preempted_for_c"], f["preempted_other"]) == (2, 1, 0)
    assert f["preempted_after_convergence"] == 0 and f["preempted_after_c_converged"] == 0
    assert f["running_at_end"] == {"a": 4, "b": 4, "c": 8}
    assert f["work_lost_cpu_seconds"] == pytest.approx(6.0 + 4.1)
    assert f["settled_seconds"] == 6.0  # 30 s, converged at 24 s
    assert f["tasks_launched"] == 20


def test_a_preemption_after_convergence_is_oscillation():
    run = _run()
    run.preempted.append(_preempted("a-4", "b", 1020.0))
    run.preempted.append(_preempted("a-5", "c", 1025.0))
    f = figures(CFG, run)
    assert f["preempted_after_convergence"] == 1  # a-4: after b held its guarantee
    # a-5 only: a-4 came before c held its share, and any beneficiary counts after it.
    assert f["preempted_after_c_converged"] == 1


def test_a_role_that_never_converged_is_not_measured():
    run = _run()
    run.b_reached_at = run.b_reached_wall = None
    f = figures(CFG, run)
    assert f["to_guarantee_seconds"] is None and f["settled_seconds"] is None
    first = checks(CFG, f, fewest=4)[0]
    assert first.met is None and "did not reach its guarantee" in first.line()


def test_the_checks_pass_a_clean_run_and_fail_extra_preemptions():
    fewest = fewest_tasks(2.0, 0.5)
    assert fewest == 4
    f = figures(CFG, _run())
    assert all(c.met for c in checks(CFG, f, fewest)), [c.line() for c in checks(CFG, f, fewest)]
    f["preempted"] = 6
    failed = [c.name for c in checks(CFG, f, fewest) if c.met is False]
    assert failed == ["tasks preempted beyond the fewest that free b's guarantee"]
    no_third = PreemptionConfig(third_role=False)
    assert len(checks(no_third, f, fewest)) == 3
