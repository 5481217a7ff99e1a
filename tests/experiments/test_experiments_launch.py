"""agora experiment launch, tiny: emulated agents, and real agents with the raw spawn rate."""

from __future__ import annotations

import shutil

import pytest
from experiments_helpers import assert_stats, load_results, run_agora, run_experiment

from agora.experiments import report

pytestmark = pytest.mark.e2e

# ("interrupts" too where the kernel accounts them apart from the processes' times)
NAMED_ALWAYS = {"master", "runner", "kernel_threads", "outside", "other"}


def assert_cpu_account(cpu: dict, unit: str, count: int, named: set[str]) -> None:
    """Every component present, nothing negative, and each per-unit figure consistent with
    its cores: ms per unit = cores x window / count (within the rounding of the figures)."""
    assert cpu["unit"] == unit and cpu["count"] == count and cpu["window_seconds"] > 0
    machine = cpu["machine"]["cores"]
    assert all(v >= 0 for v in machine.values()), machine
    assert machine["busy"] > 0
    # The machine's categories cover its cores. They are counted in clock ticks, which this
    # VM's kernel under-counts by up to ~15% over a 2 s window (hence busy from cpuacct).
    accounted = sum(v for k, v in machine.items() if k != "busy")
    assert accounted == pytest.approx(cpu["cpus"], rel=0.25)
    assert named <= set(cpu["components"]), sorted(cpu["components"])
    per = f"ms_per_{unit}"
    window = cpu["window_seconds"]
    # Figures are rounded (cpu_seconds and cores to 1e-4, the window to 1 ms), so one derived
    # from others matches to within that rounding: 1% here, or the 0.1 ms of a cpu_seconds.
    slack = 0.05 / count + 1e-4
    window_rel = 0.01
    for name, c in cpu["components"].items():
        for key in ("cpu_seconds", "cores", "user_cores", "system_cores", per, "share"):
            assert c[key] >= 0, (name, key, c)
        assert c["cores"] == pytest.approx(c["user_cores"] + c["system_cores"], abs=2e-4)
        assert c["cores"] == pytest.approx(
            c["cpu_seconds"] / window, rel=window_rel, abs=5e-5 / window + 1e-4
        )
        assert c[per] == pytest.approx(c["cpu_seconds"] * 1000 / count, rel=1e-3, abs=slack)
        # cores is rounded to 1e-4 (0.05 ms per second of window) and the figure itself to
        # 1e-4 ms: both roundings add up (a 0.5 s window over 27 processes needed both).
        assert c[per] == pytest.approx(
            c["cores"] * window * 1000 / count, rel=window_rel, abs=0.05 * window / count + 1e-4
        )
    busy = cpu["machine"]["busy_cpu_seconds"]
    outside = cpu["components"]["outside"]["cpu_seconds"]
    experiment = cpu["experiment"]
    assert 0 <= experiment["cpu_seconds"] <= busy
    if busy >= outside:
        assert experiment["cpu_seconds"] == pytest.approx(busy - outside, abs=1e-3)
    assert experiment[per] == pytest.approx(
        experiment["cpu_seconds"] * 1000 / count, rel=1e-3, abs=slack
    )
    shares = sum(c["share"] for c in cpu["components"].values())
    total = sum(c["cpu_seconds"] for c in cpu["components"].values())
    if cpu["residual_cores"] >= 0:  # else other is 0 and the named ones overshoot a little
        assert total == pytest.approx(busy, abs=1e-3) and shares == pytest.approx(1, abs=2e-3)
        assert cpu["machine"][f"busy_{per}"] == pytest.approx(
            sum(c[per] for c in cpu["components"].values()), rel=1e-3, abs=1e-3
        )


# Two emulated agents, 4 tasks in flight for 2 s: enough to count launches, quick to run.
SMALL_EMULATED_RUN = ("--agents", "2", "--seconds", "2", "--warmup", "0.5", "--concurrency", "4")


def test_launch_on_emulated_agents(tmp_path):
    out = tmp_path / "launch"
    run_experiment("launch", *SMALL_EMULATED_RUN, "--latency-seconds", "1", "--out", str(out))
    data = load_results(out, "launch")
    (run,) = data["runs"]
    assert run["real_agents"] is False and run["tasks_finished"] > 0
    assert_stats(run["figures_ms"]["accept_to_running"])
    assert_stats(run["figures_ms"]["accept_to_running_loaded"])
    assert run["raw_spawn"] is None
    assert all(t["met"] is None for t in data["targets"])  # they need real agents
    cpu = run["cpu"]
    assert_cpu_account(cpu, "task", run["tasks_finished"], NAMED_ALWAYS | {"fleet"})
    assert cpu["components"]["fleet"]["kind"] == "agents"
    assert not any(c["kind"] == "launchers" for c in cpu["components"].values())
    assert "Where the CPU goes" in (out / "summary.md").read_text()
    assert "launch_cpu.png" in data["plots"]
    # How the launches went, counted over the throughput window only.
    per_task, counts = run["per_task"], run["window_counts"]
    assert counts["launched"] > 0 and counts["accepts"] > 0
    assert counts["launched"] <= run["counts"]["launched"]
    assert per_task["tasks_per_accept"] == pytest.approx(
        counts["launched"] / counts["accepts"], abs=0.01
    )
    assert per_task["accepts"] == pytest.approx(counts["accepts"] / counts["launched"], abs=1e-3)


def test_launch_one_task_an_accept(tmp_path):
    """--tasks-per-accept 1: every task pays its own Accept, and the summary says so."""
    out = tmp_path / "launch"
    run_experiment(
        "launch",
        *SMALL_EMULATED_RUN,
        "--latency-seconds",
        "0.5",
        "--tasks-per-accept",
        "1",
        "--out",
        str(out),
    )
    data = load_results(out, "launch")
    (run,) = data["runs"]
    assert data["config"]["tasks_per_accept"] == 1 and run["tasks_finished"] > 0
    assert run["window_counts"]["accepts"] == run["window_counts"]["launched"] > 0
    assert run["per_task"]["accepts"] == run["per_task"]["tasks_per_accept"] == 1.0
    assert "at most 1 task(s) an Accept (`--tasks-per-accept`)" in (out / "summary.md").read_text()


def test_launch_refuses_a_negative_tasks_per_accept(tmp_path):
    result = run_agora(
        "experiment", "launch", "--tasks-per-accept", "-1", "--out", str(tmp_path / "x")
    )
    assert result.returncode == 2
    assert "--tasks-per-accept: must be 0 or more, got -1" in result.stderr
    assert not (tmp_path / "x").exists()


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
        "--work-dir",
        str(tmp_path),
        "--out",
        str(out),
    )
    data = load_results(out, "launch")
    (run,) = data["runs"]
    fs = run["work_dir_filesystem"]
    assert fs["path"] == str(tmp_path) and data["config"]["work_dir"] == str(tmp_path)
    assert_stats(fs["sandbox_create_ms"])
    # The agents' work dirs are removed with the run; only what the test made is left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["launch-real"]
    assert run["real_agents"] is True and run["tasks_finished"] > 0 and run["failed_tasks"] == 0
    assert run["raw_spawn"]["processes"] > 0 and run["raw_python_spawn"]["processes"] > 0
    assert_stats(run["raw_spawn"]["spawn_and_wait_ms"])
    assert run["throughput_vs_raw_spawn"] > 0
    assert_stats(run["figures_ms"]["accept_to_running"])
    assert_stats(run["figures_ms"]["accept_to_starting"])
    assert all(t["met"] is not None for t in data["targets"])
    cpu = run["cpu"]
    assert_cpu_account(cpu, "task", run["tasks_finished"], NAMED_ALWAYS | {"agent-0", "launcher-0"})
    assert cpu["notes"] == [] or all("launcher" not in n for n in cpu["notes"]), cpu["notes"]
    assert run["master_cpu_cores"] == pytest.approx(cpu["components"]["master"]["cores"], abs=1e-3)
    for spawn in (run["raw_spawn"], run["raw_python_spawn"]):
        assert_cpu_account(
            spawn["cpu"], "process", spawn["processes"], {"runner", "spawned", "other"}
        )
        assert spawn["cpu_ms_per_process"] == spawn["cpu"]["experiment"]["ms_per_process"] > 0
        assert spawn["machine_cpu_ms_per_process"] >= spawn["cpu_ms_per_process"]
    summary = (out / "summary.md").read_text()
    assert "| launcher-0 |" in summary and "CPU ms per task" in summary
    assert "launch_cpu.png" in data["plots"]
    # docs/experiments.md's generated section shows the same account.
    docs = tmp_path / "docs"
    (docs / "figures" / "launch").mkdir(parents=True)
    shutil.copy(out / "results.json", docs / "figures" / "launch" / "results.json")
    text = report.section(docs, docs / "figures")
    assert "| where (throughput window) | cores | CPU ms per task | share |" in text
    # An idle component is left out there: the launcher is, now that the agent spawns the C
    # wrapper itself (the summary above still lists it).
    assert "| agent-0 |" in text and "raw spawn of `true`, per process" in text
    assert f"work dirs under `{tmp_path}`" in text


def test_launch_with_and_without_mutual_tls_in_the_same_run(tmp_path):
    out = tmp_path / "launch-tls"
    run_experiment(
        "launch", "--agents", "2", "--seconds", "2", "--latency-seconds", "1",
        "--warmup", "0.5", "--concurrency", "4", "--tls", "off,on", "--out", str(out),
    )  # fmt: skip
    data = load_results(out, "launch")
    plain, secure = data["runs"]
    assert (plain["tls"], secure["tls"]) == (False, True)
    assert secure["label"].endswith("mTLS")
    for run in (plain, secure):  # every task went through mutual TLS in the second
        assert run["tasks_finished"] > 0 and run["failed_tasks"] == 0
        assert_stats(run["figures_ms"]["accept_to_running"])
    assert "Plaintext and mutual TLS" in (out / "summary.md").read_text()
