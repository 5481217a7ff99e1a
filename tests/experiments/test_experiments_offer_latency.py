"""agora experiment offer-latency, tiny: both allocation modes, every figure present, the
end-to-end figure named offer latency, targets it could not measure said so in words, and the
plots' legends counting what the tables count."""

from __future__ import annotations

import csv
import re
import shutil

import pytest
from experiments_helpers import assert_stats, load_results, run_experiment

from agora.experiments import plots, report
from agora.experiments.offer_latency import (
    METRICS,
    NAMES,
    OFFER_LATENCY,
    UPDATE_TO_OFFER,
    OfferLatencyConfig,
    _targets,
)
from agora.experiments.results import Results, target_line, targets_md

pytestmark = pytest.mark.e2e

P50 = "offer latency p50 at 1,000 agents and 10 frameworks"
P99 = "offer latency p99 at 1,000 agents and 10 frameworks"


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
    assert P50 in proc.stdout
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
    header = (out / "samples.csv").read_text().splitlines()[0]
    assert header.split(",")[:5] == ["run", "agents", "frameworks", "mode", "metric"]
    assert "offer_latency_cdf.png" in data["plots"]

    # Offer latency is the end-to-end figure: the summary says so, and the targets read it.
    summary = (out / "summary.md").read_text()
    assert f"**offer latency** (`{OFFER_LATENCY}`, the headline" in summary
    assert f"**update read -> offer read** (`{UPDATE_TO_OFFER}`, secondary)" in summary
    assert "the agent's stamp" in data["targets"][0]["measured_in"]

    # 4 agents and 2 frameworks: the targets' configuration was not run, and that is said.
    assert [t["name"] for t in data["targets"]] == [P50, P99]
    for target in data["targets"]:
        assert target["figure"] is None and target["met"] is None
        assert target["not_measured"] == "it ran 4 agents with 2 frameworks"
        sentence = f"{target['name']} ({target['measured_in']}): not measured in this run "
        assert target_line(target) == sentence + "(it ran 4 agents with 2 frameworks)"
    assert "not measured in this run (it ran 4 agents with 2 frameworks)" in summary
    assert "| - |" not in summary.split("## Targets")[1].split("##")[0]

    # The CDF's legend counts what the summary's table counts, zeros included.
    legends = data["legends"]["offer_latency_cdf.png"]
    samples = list(csv.DictReader((out / "samples.csv").read_text().splitlines()))
    for metric, legend in (
        (OFFER_LATENCY, legends[0]),  # event mode
        (OFFER_LATENCY, legends[1]),  # interval mode
        (UPDATE_TO_OFFER, legends[2]),  # event mode's update read -> offer read
    ):
        mode = "event" if legend.startswith("event") else "interval"
        assert _table_count(summary, metric, f"{mode} a=4 f=2") == _legend_n(legend)
        zeros = sum(
            1 for row in samples if row["metric"] == metric and row["mode"] == mode
            and float(row["ms"]) <= 0
        )  # fmt: skip
        if zeros:
            assert f", {zeros} at 0 ms drawn at " in legend
        else:
            assert "drawn at" not in legend

    # docs/experiments.md's generated section says the same.
    docs = tmp_path / "docs"
    (docs / "figures" / "offer-latency").mkdir(parents=True)
    shutil.copy(out / "results.json", docs / "figures" / "offer-latency" / "results.json")
    text = report.section(docs, docs / "figures")
    assert f"| {P50} | not measured in this run (it ran 4 agents with 2 frameworks) |" in text
    assert "| run | offer latency p50 / p99 (ms) | update read -> offer read p50 |" in text


def _legend_n(legend: str) -> int:
    match = re.search(r"\(n=(\d+)", legend)
    assert match, legend
    return int(match.group(1))


def _table_count(summary: str, metric: str, label: str) -> int:
    """The count column of the summary's Figures row for `metric` in the run `label`."""
    row = f"| {NAMES[metric]}, {label} | "
    (line,) = [line for line in summary.splitlines() if line.startswith(row)]
    return int(line[len(row) :].split("|")[0])


def test_a_target_the_run_did_not_measure_says_what_it_ran_instead(tmp_path):
    results = Results("offer-latency", tmp_path, {}, ["agora", "experiment", "offer-latency"])
    for mode in ("event", "interval"):
        results.add_run({"agents": 200, "frameworks": 10, "mode": mode, "figures_ms": {}})
    _targets(OfferLatencyConfig(agents=[200], frameworks=[10]), results)
    p50 = results.data["targets"][0]
    assert target_line(p50) == (
        f"{P50} (event mode, the agent's stamp on a task's end -> a framework reads the offer): "
        "not measured in this run (it ran 200 agents with 10 frameworks)"
    )
    assert "None" not in targets_md(results.data["targets"])


def test_a_run_that_measured_its_target_prints_the_figure_against_the_limit(tmp_path):
    results = Results("offer-latency", tmp_path, {}, ["agora", "experiment", "offer-latency"])
    figures = {OFFER_LATENCY: {"p50": 0.9, "p99": 4.5}}
    results.add_run({"agents": 1000, "frameworks": 10, "mode": "event", "figures_ms": figures})
    _targets(OfferLatencyConfig(), results)
    assert [target_line(t) for t in results.data["targets"]] == [
        f"{P50}: 0.9 ms (limit <= 1 ms) met",
        f"{P99}: 4.5 ms (limit <= 20 ms) met",
    ]


def test_a_cdf_legend_counts_the_zeros_it_draws_at_the_axis_floor(tmp_path):
    series = [("gap", [0.0, 0.0, 0.03, 1.2]), ("end to end", [0.8, 1.1, float("nan")])]
    assert plots.log_floor(series) == pytest.approx(0.001)
    assert plots.cdf_labels(series) == [
        "gap (n=4, 2 at 0 ms drawn at 0.001 ms)",
        "end to end (n=2)",
    ]
    assert plots.cdf_labels(series, logx=False) == ["gap (n=4)", "end to end (n=2)"]
    assert plots.cdf(tmp_path / "cdf.png", "t", "ms", series) == "cdf.png"
    assert (tmp_path / "cdf.png").stat().st_size > 0


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
    assert_stats(runs[2]["figures_ms"][OFFER_LATENCY])
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
    assert_stats(run["figures_ms"][OFFER_LATENCY])
    (tls,) = [t for t in data["targets"] if t["name"] == f"{P50} with mutual TLS"]
    assert tls["not_measured"] == "it ran 4 agents with 1 framework"
