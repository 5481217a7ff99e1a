"""agora experiment failover, tiny: real ZooKeeper, masters, agents and a framework."""

from __future__ import annotations

import csv

import pytest
from experiments_helpers import load_results, run_experiment

pytestmark = pytest.mark.e2e


def test_failover_measures_each_kill_and_counts_lost_and_doubled_tasks(tmp_path):
    out = tmp_path / "failover"
    run_experiment("failover", "--kills", "2", "--agents", "2", "--out", str(out), timeout=180)
    data = load_results(out, "failover")
    (run,) = data["runs"]
    assert run["kills"] == 2 and run["framework_kept_its_id"] is True
    assert run["tasks_launched"] > 0
    assert run["tasks_lost"] == 0 and run["tasks_run_twice"] == 0
    with open(out / "samples.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["kill"]) for r in rows] == [1, 2]
    for row in rows:
        elected, back = float(row["elected"]), float(row["back"])
        # Nothing can be back before a leader is elected, and all of it is back in the end.
        assert 0 < elected <= back
        assert float(row["agents_back"]) <= back and float(row["framework_back"]) <= back
    names = [t["name"] for t in data["targets"]]
    assert names == [
        "kill -> all back p50",
        "kill -> all back p99",
        "tasks lost",
        "tasks run twice",
    ]
    assert data["plots"] == ["failover.png"]


def test_failover_pause_resumes_a_deposed_leader_that_does_nothing(tmp_path):
    out = tmp_path / "pause"
    run_experiment(
        "failover",
        "--fault",
        "pause",
        "--kills",
        "1",
        "--agents",
        "1",
        "--out",
        str(out),
        timeout=180,
    )
    data = load_results(out, "failover")
    (run,) = data["runs"]
    assert run["fault"] == "pause" and run["framework_kept_its_id"] is True
    assert run["events_from_a_deposed_leader"] == 0
    assert run["tasks_lost"] == 0 and run["tasks_run_twice"] == 0
    with open(out / "samples.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert 0 < float(row["elected"]) <= float(row["back"])
    assert float(row["resumed_to_refusing"]) >= 0


def test_failover_of_the_batch_daemon_loses_and_repeats_no_instance(tmp_path):
    out = tmp_path / "batch"
    run_experiment(
        "failover",
        "--component",
        "batch",
        "--kills",
        "2",
        "--agents",
        "1",
        "--instances",
        "120",
        "--out",
        str(out),
        timeout=180,
    )
    data = load_results(out, "failover")
    (run,) = data["runs"]
    assert run["kills"] == 2 and run["succeeded"] == 120
    assert run["instances_lost"] == 0 and run["instances_run_twice"] == 0
    with open(out / "samples.csv") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        # A client gets the job only once a new leader is elected and serving.
        assert 0 < float(row["elected"]) <= float(row["client_back"])
    assert [t["name"] for t in data["targets"]] == [
        "kill -> client back p50",
        "kill -> launches back p50",
        "instances lost",
        "instances run twice",
    ]
