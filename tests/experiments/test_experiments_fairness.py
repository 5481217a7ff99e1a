"""agora experiment fairness, tiny; and the DRF optimum by progressive filling (pure)."""

from __future__ import annotations

import pytest
from experiments_helpers import load_results, run_experiment

from agora.experiments.drf import progressive_filling


def test_drf_paper_example():
    # 9 CPUs, 18 GB; A's tasks <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>. shares: A = 3*4/18 = 2/3,
    # B = 2*3/9 = 2/3.
    result = progressive_filling(
        {"cpus": 9, "mem": 18}, {"a": {"cpus": 1, "mem": 4}, "b": {"cpus": 3, "mem": 1}}
    )
    assert (result["a"]["tasks"], result["b"]["tasks"]) == (3, 2)
    assert result["a"]["dominant_share"] == pytest.approx(2 / 3)
    assert result["b"]["dominant_share"] == pytest.approx(2 / 3)


def test_a_lone_framework_fills_its_bottleneck():
    result = progressive_filling({"cpus": 8, "mem": 100}, {"only": {"cpus": 1, "mem": 30}})
    assert result["only"]["tasks"] == 3 and result["only"]["dominant_share"] == pytest.approx(0.9)


@pytest.mark.e2e
def test_fairness_samples_shares_and_compares_with_the_optimum(tmp_path):
    out = tmp_path / "fair"
    run_experiment(
        "fairness",
        "--agents",
        "4",
        "--seconds",
        "5",
        "--sample-interval",
        "0.2",
        "--mean-duration",
        "0.5",
        "--out",
        str(out),
    )
    data = load_results(out, "fairness")
    (run,) = data["runs"]
    assert set(run["final_allocation"]) == {"mem-heavy", "cpu-heavy", "small"}
    for entry in run["final_allocation"].values():
        assert entry["samples"] > 0 and entry["measured_dominant_share"] is not None
        assert 0 < entry["optimum_dominant_share"] <= 1
    assert [e["what"] for e in run["events"]] == [
        "mem-heavy arrives",
        "cpu-heavy arrives",
        "small arrives",
        "small leaves",
    ]
    assert run["phases"] and run["tasks_launched"] > 0
    header = (out / "samples.csv").read_text().splitlines()[0]
    assert header == "t,framework,dominant_share,tasks,connected"
    assert {"fairness_shares.png", "fairness_final.png"} <= set(data["plots"])
