"""agora experiment launch, tiny: emulated agents, and real agents with the raw spawn rate."""

from __future__ import annotations

import pytest
from experiments_helpers import assert_stats, load_results, run_experiment

pytestmark = pytest.mark.e2e


def test_launch_on_emulated_agents(tmp_path):
    out = tmp_path / "launch"
    run_experiment(
        "launch",
        "--agents",
        "2",
        "--seconds",
        "2",
        "--latency-seconds",
        "1",
        "--warmup",
        "0.5",
        "--concurrency",
        "4",
        "--out",
        str(out),
    )
    data = load_results(out, "launch")
    (run,) = data["runs"]
    assert run["real_agents"] is False and run["tasks_finished"] > 0
    assert_stats(run["figures_ms"]["accept_to_running"])
    assert_stats(run["figures_ms"]["accept_to_running_loaded"])
    assert run["raw_spawn"] is None
    assert all(t["met"] is None for t in data["targets"])  # they need real agents


def test_launch_on_real_agents_reports_the_spawn_ratio(tmp_path):
    out = tmp_path / "launch-real"
    run_experiment(
        "launch",
        "--real-agents",
        "1",
        "--seconds",
        "2",
        "--latency-seconds",
        "1",
        "--warmup",
        "0.5",
        "--concurrency",
        "2",
        "--spawn-seconds",
        "0.5",
        "--out",
        str(out),
    )
    data = load_results(out, "launch")
    (run,) = data["runs"]
    assert run["real_agents"] is True and run["tasks_finished"] > 0 and run["failed_tasks"] == 0
    assert run["raw_spawn"]["processes"] > 0 and run["raw_python_spawn"]["processes"] > 0
    assert_stats(run["raw_spawn"]["spawn_and_wait_ms"])
    assert run["throughput_vs_raw_spawn"] > 0
    assert_stats(run["figures_ms"]["accept_to_running"])
    assert_stats(run["figures_ms"]["accept_to_starting"])
    assert all(t["met"] is not None for t in data["targets"])
