"""agora experiment scale, tiny: two steps, every field, allocation reached every agent."""

from __future__ import annotations

import pytest
from experiments_helpers import assert_stats, load_results, run_experiment

pytestmark = pytest.mark.e2e


def test_scale_two_small_steps(tmp_path):
    out = tmp_path / "scale"
    run_experiment("scale", "--agents", "3,8", "--seconds", "1", "--out", str(out))
    data = load_results(out, "scale")
    assert [r["agents"] for r in data["runs"]] == [3, 8]
    for run in data["runs"]:
        assert run["first_round_offers"] == run["agents"]
        assert run["first_round_offer_events"] >= 1
        for key in (
            "register_seconds",
            "idle_master_cpu_cores",
            "master_cpu_per_heartbeat_us",
            "master_rss_mb_idle",
            "master_rss_mb_after_offers",
        ):
            assert run[key] is not None and run[key] >= 0, key
        assert_stats(run["figures_ms"]["full_allocation_subscribe_to_first_offers"])
        assert_stats(run["figures_ms"]["full_allocation_subscribe_to_all_offers"])
        assert_stats(run["figures_ms"]["one_agent_decline_to_reoffer"])
        assert run["agents_removed"] == 0  # every agent was alive throughout
    # The targets are set at 10,000 agents (and 50,000): not measured by this tiny run.
    assert len(data["targets"]) == 3
    assert all(target["met"] is None for target in data["targets"])
    assert {"scale_master_cpu.png", "scale_allocation_time.png"} <= set(data["plots"])


def test_scale_with_carried_fleets(tmp_path):
    """--carried: the master sees the fleet's agents on one relay stream and offers them all."""
    out = tmp_path / "scale"
    run_experiment("scale", "--agents", "12", "--carried", "--seconds", "1", "--out", str(out))
    (run,) = load_results(out, "scale")["runs"]
    assert run["carried"] is True and run["relays"] == 0
    assert run["first_round_offers"] == 12
    assert run["agents_removed"] == 0
    assert "carried by 1 fleet process (a relay stream each)" in (out / "summary.md").read_text()


def test_removals_are_counted_in_this_steps_part_of_the_masters_log(tmp_path):
    """The master's log is appended to across runs into one --out: an earlier run's removals
    (here, two) are not this step's."""
    from agora.experiments.scale import _removals, _size

    log = tmp_path / "master.log"
    log.write_text("[warning] removing agent agent_id=a\n[warning] removing agent agent_id=b\n")
    start = _size(log)
    with open(log, "a") as more:
        more.write("[info] master started\n[warning] removing agent agent_id=c reason=silent\n")
    assert _removals(log, start) == 1
    assert _removals(log, 0) == 3
    assert _size(tmp_path / "none.log") == 0
