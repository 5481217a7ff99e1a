"""What every experiment writes: figures as min/p50/p90/p99/max, the machine, raw samples.

DIR/results.json = {"experiment", "started_at", "command", "config", "machine", "runs": [...],
"targets": [...]}; DIR/samples.csv has one row per raw sample; DIR/summary.md says in words
what was measured and how.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

STAT_KEYS = ("count", "min", "p50", "p90", "p99", "max", "mean")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(values: Iterable[float]) -> dict[str, float | int | None]:
    """count, min, p50, p90, p99, max, mean; None for each figure when there are no values."""
    data = sorted(v for v in values if v is not None and math.isfinite(v))
    if not data:
        return {"count": 0, **{k: None for k in STAT_KEYS[1:]}}
    return {
        "count": len(data),
        "min": round(data[0], 4),
        "p50": round(percentile(data, 50), 4),
        "p90": round(percentile(data, 90), 4),
        "p99": round(percentile(data, 99), 4),
        "max": round(data[-1], 4),
        "mean": round(sum(data) / len(data), 4),
    }


def machine() -> dict:
    cpu_model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu_model": cpu_model,
        "cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_mb": round(psutil.virtual_memory().total / (1024 * 1024)),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in load],
    }


class Results:
    """Collects an experiment's runs and writes its files."""

    def __init__(self, experiment: str, out: Path, config: dict, command: list[str]) -> None:
        self.experiment = experiment
        self.out = out
        # The results.json document: JSON values of several shapes, keyed by field name.
        self.data: dict[str, Any] = {
            "experiment": experiment,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command,
            "config": config,
            "machine": machine(),
            "runs": [],
            "targets": [],
        }
        self._rows: list[dict] = []
        out.mkdir(parents=True, exist_ok=True)

    @property
    def runs(self) -> list[dict]:
        return self.data["runs"]

    def add_run(self, run: dict) -> None:
        self.data["runs"].append(run)

    def add_samples(self, rows: Iterable[dict]) -> None:
        self._rows.extend(rows)

    def target(
        self,
        name: str,
        figure: float | None,
        limit: float,
        unit: str,
        at_most: bool = True,
        measured_in: str = "",
        not_measured: str = "",
    ) -> dict:
        """Records a target; `figure` None means this run did not measure it, and
        `not_measured` says why in words (what the run ran instead), for not_measured_text."""
        met = None if figure is None else (figure <= limit if at_most else figure >= limit)
        entry = {
            "name": name,
            "figure": None if figure is None else round(figure, 4),
            "limit": limit,
            "unit": unit,
            "at_most": at_most,
            "met": met,
            "measured_in": measured_in,
        }
        if figure is None:
            entry["not_measured"] = not_measured
        self.data["targets"].append(entry)
        return entry

    def write(self, summary_md: str, plots: Sequence[str] = ()) -> None:
        self.data["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.data["plots"] = list(plots)
        self.data["samples_csv"] = "samples.csv"
        (self.out / "results.json").write_text(json.dumps(self.data, indent=2) + "\n")
        fields: list[str] = []
        for row in self._rows:
            for key in row:
                if key not in fields:
                    fields.append(key)
        with open(self.out / "samples.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields or ["run", "metric", "value"])
            writer.writeheader()
            writer.writerows(self._rows)
        (self.out / "summary.md").write_text(summary_md)


def fmt_ms(stats: dict | None, key: str = "p50") -> str:
    if not stats or stats.get(key) is None:
        return "-"
    value = stats[key]
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def stats_table(rows: list[tuple[str, dict]], unit: str = "ms") -> str:
    """A markdown table: one row per (label, stats)."""
    lines = [
        f"| run | count | min | p50 | p90 | p99 | max ({unit}) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in rows:
        lines.append(
            f"| {label} | {s.get('count', 0)} | {fmt_ms(s, 'min')} | {fmt_ms(s, 'p50')}"
            f" | {fmt_ms(s, 'p90')} | {fmt_ms(s, 'p99')} | {fmt_ms(s, 'max')} |"
        )
    return "\n".join(lines)


def not_measured_text(target: dict) -> str:
    """A target this run did not measure, in words: "offer latency p50 at 1,000 agents and 10
    frameworks (event mode, ...): not measured in this run (it ran 200 agents with 10
    frameworks)". Never a figure of None beside a limit, which reads as if one was measured."""
    where = f" ({target['measured_in']})" if target.get("measured_in") else ""
    why = f" ({target['not_measured']})" if target.get("not_measured") else ""
    return f"{target['name']}{where}: not measured in this run{why}"


def target_line(target: dict) -> str:
    """One line for a terminal: the figure against its limit, or why it was not measured."""
    if target["figure"] is None:
        return not_measured_text(target)
    sign = "<=" if target["at_most"] else ">="
    met = "met" if target["met"] else "MISSED"
    return (
        f"{target['name']}: {target['figure']:g} {target['unit']} "
        f"(limit {sign} {target['limit']:g} {target['unit']}) {met}"
    )


def targets_md(targets: list[dict]) -> str:
    if not targets:
        return ""
    lines = ["| target | measured | limit | met |", "|---|---:|---:|---|"]
    for t in targets:
        sign = "<=" if t["at_most"] else ">="
        figure = measured_cell(t)
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['name']} | {figure} | {sign} {t['limit']:g} {t['unit']} | {met} |")
    return "\n".join(lines)


def measured_cell(target: dict) -> str:
    """The figure, or for a target not measured the reason in words (in a table the row
    already names the target and where it is measured)."""
    if target["figure"] is not None:
        return f"{target['figure']:g} {target['unit']}"
    why = target.get("not_measured")
    return f"not measured in this run ({why})" if why else "not measured in this run"


class Progress:
    """One status line on stderr, rewritten in place on a terminal, else printed each time."""

    def __init__(self, experiment: str, quiet: bool = False) -> None:
        self.experiment = experiment
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def show(self, text: str, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and not self.tty and now - self._last < 2.0:
            return
        self._last = now
        line = f"[{self.experiment}] {text}"
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self, text: str) -> None:
        if self.quiet:
            return
        if self.tty:
            sys.stderr.write("\r\x1b[K")
        sys.stderr.write(f"[{self.experiment}] {text}\n")
        sys.stderr.flush()
