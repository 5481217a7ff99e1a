"""agora experiment preemption, tiny: a full cluster, a role below its guarantee, a weighted
role below its fair share, the figures."""

from __future__ import annotations

import pytest
from experiments_helpers import load_results, run_experiment


@pytest.mark.e2e
def test_preemption_gets_a_starved_role_its_guarantee_and_says_what_it_cost(tmp_path):
    out = tmp_path / "pre"
    run_experiment(
        "preemption", "--seconds", "12", "--timeout", "2", "--sample-interval", "0.25",
        "--settle", "3", "--no-compare", "--out", str(out),
    )  # fmt: skip
    data = load_results(out, "preemption")
    (run,) = data["runs"]
    assert run["mode"] == "preemption" and run["b_arrived_seconds"] is not None
    # b reached its guarantee (4 tasks of 0.5 cpu on 4 agents of 2 cpus), by stopping at most
    # as many of a's tasks as that takes (fewer if some of a's ended by themselves), and
    # nothing was stopped after.
    assert run["to_guarantee_seconds"] is not None
    assert 0 < run["preempted"] <= 4
    assert run["preempted_after_convergence"] == 0
    assert run["work_lost_cpu_seconds"] >= 0
    # c, of weight 2 against a's 1, arrived halfway wanting more than its share: it ran its
    # weighted share of what b's guarantee leaves (8 tasks, a keeps 4), and neither preempted
    # the other back after.
    assert run["c_to_share_seconds"] is not None
    assert run["preempted_after_c_converged"] == 0
    assert run["running_at_end"]["c"] in (7, 8) and run["running_at_end"]["b"] == 4
    assert [t["met"] for t in data["targets"]][1:] == [True, True, True, True]
    # It watched on for --settle seconds after c converged (so by construction, however slow
    # the machine: the run ends no sooner); what it saw there is counted, not timed: samples
    # after that point, one row per role each. How long the run took is no test's business.
    assert run["settled_seconds"] >= 3
    assert {"preemption_running.png", "preemption_shares.png"} <= set(data["plots"])
    header, *rows = (out / "samples.csv").read_text().splitlines()
    assert header == "mode,t,role,running"
    c_converged = run["c_arrived_seconds"] + run["c_to_share_seconds"]
    after = [row.split(",") for row in rows if float(row.split(",")[1]) > c_converged + 0.01]
    assert after and len(after) % 3 == 0, after
    assert {role for _, _, role, _ in after} == {"a", "b", "c"}


def test_c_share_is_its_weights_part_but_no_more_than_a_leaves():
    from agora.experiments.preemption import c_share_cpus

    # 8 cpus, b guaranteed 2: weights 1 / 1 / 2 give c half (4 cpus), a keeps its quarter.
    assert c_share_cpus(8, 2, b_weight=1, c_weight=2) == 4
    # b weighing 3: c is owed 2/6 of 8 cpus; a's floor (8/6) leaves it more than that.
    assert abs(c_share_cpus(8, 2, b_weight=3, c_weight=2) - 8 / 3) < 1e-9
    # A large guarantee for b: a's fair share is what stops c (8 - 5 - 8/4 = 1 cpu).
    assert c_share_cpus(8, 5, b_weight=1, c_weight=2) == 1
