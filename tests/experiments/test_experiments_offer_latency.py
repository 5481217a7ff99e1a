"""agora experiment offer-latency, tiny: both allocation modes, every figure present."""

from __future__ import annotations

import pytest
from experiments_helpers import assert_stats, load_results, run_experiment

from agora.experiments.offer_latency import METRICS

pytestmark = pytest.mark.e2e


def test_offer_latency_writes_every_figure_for_both_modes(tmp_path):
    out = tmp_path / "ol"
    proc = run_experiment(
        "offer-latency",
        "--agents",
        "4",
        "--frameworks",
        "2",
        "--seconds",
        "3",
        "--warmup",
        "0.5",
        "--joiners",
        "2",
        "--decline-fraction",
        "0.2",
        "--allocation-interval",
        "0.3",
        "--out",
        str(out),
    )
    assert "offer latency p50" in proc.stdout
    data = load_results(out, "offer-latency")
    assert [(r["agents"], r["frameworks"], r["mode"]) for r in data["runs"]] == [
        (4, 2, "event"),
        (4, 2, "interval"),
    ]
    for run in data["runs"]:
        assert set(run["figures_ms"]) == set(METRICS)
        for metric in (
            "task_end_to_offer",
            "subscribe_to_first_offer",
            "join_to_offer",
            "accept_to_running",
        ):
            assert_stats(run["figures_ms"][metric])
        assert run["figures_ms"]["join_to_offer"]["count"] == 2
        assert run["master_cpu_cores"] >= 0 and run["master_rss_mb"] > 0
        assert run["counts"]["terminal"] > 0
    assert {t["name"] for t in data["targets"]} == {"offer latency p50", "offer latency p99"}
    header = (out / "samples.csv").read_text().splitlines()[0]
    assert header.split(",")[:5] == ["run", "agents", "frameworks", "mode", "metric"]
    assert "offer_latency_cdf.png" in data["plots"]


def test_bad_flag_values_are_usage_errors(tmp_path):
    import subprocess

    from agora.experiments.processes import ROOT, agora_argv

    proc = subprocess.run(
        agora_argv("experiment", "offer-latency", "--agents", "ten", "--out", str(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--agents" in proc.stderr


def test_offer_latency_with_the_dashboard_open_reports_what_the_viewers_fetched(tmp_path):
    out = tmp_path / "ol-dash"
    proc = run_experiment(
        "offer-latency",
        "--agents", "4", "--frameworks", "1", "--modes", "event", "--seconds", "3",
        "--warmup", "0.5", "--joiners", "1", "--dashboard-viewers", "0,2",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = load_results(out, "offer-latency")
    runs = {r["dashboard_viewers"]: r for r in data["runs"]}
    assert set(runs) == {0, 2}
    assert runs[0]["dashboard"] is None
    seen = runs[2]["dashboard"]
    # Two viewers polling six pages every 2 s for several seconds, every answer a 200.
    assert seen["viewers"] == 2 and seen["requests"] >= 12 and seen["errors"] == 0
    assert runs[2]["label"].endswith("dashboard=2")
    assert_stats(runs[2]["figures_ms"]["task_end_to_offer"])
    # The targets are read from the run without the dashboard.
    assert data["targets"]


def test_offer_latency_over_mutual_tls_reports_its_own_target(tmp_path):
    out = tmp_path / "ol-tls"
    run_experiment(
        "offer-latency", "--agents", "4", "--frameworks", "1", "--modes", "event",
        "--seconds", "2", "--warmup", "0.5", "--joiners", "1", "--tls", "on",
        "--out", str(out),
    )  # fmt: skip
    data = load_results(out, "offer-latency")
    (run,) = data["runs"]
    assert run["tls"] is True and run["label"].endswith("mTLS")
    assert_stats(run["figures_ms"]["task_end_to_offer"])
    assert "offer latency p50 with mutual TLS" in [t["name"] for t in data["targets"]]
