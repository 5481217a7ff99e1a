"""Running `agora experiment ...` as a user would (a subprocess) and checking its files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from agora.experiments.processes import ROOT, agora_argv
from agora.experiments.results import STAT_KEYS

MACHINE_KEYS = {"cpu_model", "cores", "memory_mb", "python"}


def run_agora(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`agora ARGS...` as a user runs it, whatever its exit code (the caller checks)."""
    return subprocess.run(
        agora_argv(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def run_experiment(*args: str, timeout: float = 110) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        agora_argv("experiment", *args, "--quiet"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def load_results(out: Path, experiment: str) -> dict:
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == experiment
    assert MACHINE_KEYS <= set(data["machine"])
    assert data["config"] and data["command"][:2] == ["agora", "experiment"]
    assert data["runs"], "no runs"
    for plot in data["plots"]:
        assert (out / plot).stat().st_size > 0 and plot.endswith(".png")
    assert (out / "samples.csv").read_text().count("\n") >= 1
    assert (out / "summary.md").read_text().startswith(f"# {experiment}")
    for target in data["targets"]:
        assert {"name", "figure", "limit", "unit", "met"} <= set(target)
    return data


def assert_stats(stats: dict, nonempty: bool = True) -> None:
    assert set(STAT_KEYS) <= set(stats), stats
    if nonempty:
        assert stats["count"] > 0, stats
        assert stats["min"] <= stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"]
