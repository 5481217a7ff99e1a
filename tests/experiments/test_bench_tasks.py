"""`agora bench tasks`: an agent's own CPU per task without the network, through the command
as a user runs it, on real task wrappers and processes."""

from __future__ import annotations

import json
import os

from experiments_helpers import run_agora as agora


def test_tasks_bench_runs_every_task_to_the_end_and_reports_the_cpu_of_each(tmp_path):
    done = agora(
        "bench", "tasks", "--tasks", "60", "--concurrency", "4", "--work-dir", str(tmp_path),
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["tasks"], result["concurrency"]) == (60, 4)
    assert result["work_dir"] == str(tmp_path)
    if os.geteuid() == 0:
        assert result["isolation"] != "none"  # each task in its own cgroups while it runs
    # The wrappers are the bench's children where the agent spawns them itself (pidfds, Linux
    # >= 5.3, and a C compiler: what `make system-deps` installs).
    assert result["wrapper_and_task_cpu_per_task"] is not None
    for part in ("agent_cpu_per_task", "wrapper_and_task_cpu_per_task"):
        figures = result[part]
        assert figures["ms"] > 0
        assert abs(figures["ms"] - figures["user_ms"] - figures["system_ms"]) < 0.002
    # The agent's work dir was its own, and goes with the run.
    assert list(tmp_path.iterdir()) == []
    table = agora("bench", "tasks", "--tasks", "10", "--no-cgroups", "--work-dir", str(tmp_path))
    assert table.returncode == 0, table.stderr
    assert "agent CPU per task" in table.stdout and "isolation none" in table.stdout


def test_tasks_bench_refuses_bad_input_in_one_line(tmp_path):
    done = agora("bench", "tasks", "--tasks", "0")
    assert done.returncode == 2 and "must be 1 or more" in done.stderr
    missing = tmp_path / "missing"
    done = agora("bench", "tasks", "--tasks", "5", "--work-dir", str(missing))
    assert done.returncode == 1
    assert f"cannot make a work dir under {missing}" in done.stderr
    assert "Traceback" not in done.stderr
