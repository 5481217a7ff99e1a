"""agora experiment soak, short: real daemons killed and restarted at random under mixed load;
nothing lost, nothing run twice, no update lost, and growth figures for every daemon."""

from __future__ import annotations

import pytest
from experiments_helpers import load_results, run_experiment

from agora.experiments.soak import judge_batch, segment_slopes, slope_per_hour
from agora.v1 import batch_pb2, common_pb2

pytestmark = pytest.mark.e2e


def test_a_short_soak_with_kills_loses_nothing_and_reports_growth(tmp_path):
    out = tmp_path / "soak"
    run_experiment(
        "soak", "--minutes", "1", "--kill-every", "8", "--job-every", "2",
        "--visitor-every", "15", "--warmup", "10", "--sample-every", "2", "--drain", "90",
        "--out", str(out), timeout=240,
    )  # fmt: skip
    data = load_results(out, "soak")
    (run,) = data["runs"]
    assert len(run["kills"]) >= 3, run["kills"]
    assert run["batch"]["jobs"] >= 10 and run["batch"]["instances"] == 4 * run["batch"]["jobs"]
    assert run["batch"]["lost"] == [] and run["batch"]["run_twice"] == []
    assert run["batch"]["updates_lost"] == []
    assert run["visitors"]["visitors"] >= 3 and run["visitors"]["lost"] == []
    assert run["visitors"]["tasks_finished"] == run["visitors"]["tasks_expected"]
    assert run["app_healthy_at_end"] == 2
    assert {"master", "batch", "services", "agent-0"} <= set(run["rss_slope_mb_per_hour"])
    assert set(data["plots"]) == {"soak_rss.png", "soak_fds.png", "soak_disk.png"}
    met = {t["name"]: t["met"] for t in data["targets"]}
    assert met["tasks lost"] and met["tasks run twice"] and met["status updates lost"]


def test_the_judge_counts_lost_twice_and_lost_updates_from_markers(tmp_path):
    def touch(name: str) -> None:
        (tmp_path / name).touch()

    job = batch_pb2.Job(job_id="j1")
    ok = job.instances.add(index=0, state=batch_pb2.INSTANCE_SUCCEEDED)
    ok.attempts.add(attempt=1, task_id="j1-0-1", state=common_pb2.TASK_FINISHED)
    touch("batch.j1.0.1.100.start")
    touch("batch.j1.0.1.100.end")
    # Instance 1 ran to its end twice: its first attempt was reported LOST (an update lost)
    # and relaunched.
    twice = job.instances.add(index=1, state=batch_pb2.INSTANCE_SUCCEEDED)
    twice.attempts.add(attempt=1, task_id="j1-1-1", state=common_pb2.TASK_LOST)
    twice.attempts.add(attempt=2, task_id="j1-1-2", state=common_pb2.TASK_FINISHED)
    for attempt, pid in ((1, 200), (2, 201)):
        touch(f"batch.j1.1.{attempt}.{pid}.start")
        touch(f"batch.j1.1.{attempt}.{pid}.end")
    # Instance 2 never succeeded.
    job.instances.add(index=2, state=batch_pb2.INSTANCE_PENDING)
    verdict = judge_batch([job], tmp_path)
    assert verdict["instances"] == 3
    assert verdict["lost"] == ["j1/2 INSTANCE_PENDING"]
    assert len(verdict["run_twice"]) == 1 and "j1/1" in verdict["run_twice"][0]
    assert verdict["updates_lost"] == ["j1-1-1 ran to its end but is TASK_LOST"]


def test_growth_is_fitted_per_process_lifetime_after_its_warmup():
    assert slope_per_hour([(0, 0), (1800, 5), (3600, 10)]) == pytest.approx(10.0)
    samples = [
        # A first lifetime growing 36 MB/h after a warm-up jump, then a restart (new pid).
        *({"at": t, "daemon": "master", "pid": 1, "rss_mb": (50 if t else 10) + t / 100}
          for t in range(0, 200, 10)),
        *({"at": t, "daemon": "master", "pid": 2, "rss_mb": 40.0} for t in range(200, 400, 10)),
    ]  # fmt: skip
    slopes = segment_slopes(samples, "rss_mb", warmup=10)["master"]
    assert slopes["slopes"] == [36.0, 0.0]
    assert slopes["max"] == 36.0
