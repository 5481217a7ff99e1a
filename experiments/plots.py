"""PNG plots with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen first

Series = tuple[str, Sequence[float], Sequence[float]]  # label, xs, ys


def lines(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Sequence[Series],
    *,
    logx: bool = False,
    logy: bool = False,
    hline: tuple[float, str] | None = None,
    styles: Sequence[str] | None = None,
) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for i, (label, xs, ys) in enumerate(series):
        style = styles[i] if styles and i < len(styles) else "o-"
        ax.plot(xs, ys, style, label=label)
    # A log axis needs a value above 0 to draw: a run where nothing was measured (every wait
    # None, drawn as a gap) gets a linear axis rather than matplotlib's error, which lost the
    # whole run's report.
    if logx and any(_drawable(xs) for _, xs, _ in series):
        ax.set_xscale("log")
    if logy and any(_drawable(ys) for _, _, ys in series):
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle=":", linewidth=1)
        # At the left edge whatever the x scale (the data's first x was off a log axis).
        label, left = f" {hline[1]}", ax.get_yaxis_transform()
        ax.text(0.0, hline[0], label, va="bottom", color="grey", fontsize=8, transform=left)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _drawable(values: Sequence[float]) -> bool:
    """Whether a log axis could show any of `values` (one finite and above 0)."""
    return any(v is not None and math.isfinite(v) and v > 0 for v in values)


def cdf(
    path: Path,
    title: str,
    xlabel: str,
    series: Sequence[tuple[str, Sequence[float]]],
    logx: bool = True,
    unit: str = "ms",
) -> str:
    """Empirical CDFs. Every finite value is drawn and counted in its legend's n, as a table
    of the same values counts them: on a log axis the values at or below zero (an event that
    came before the one it is timed from) are drawn at a floor a decade below the smallest
    positive value, marked on the axis, and the legend says how many are drawn there."""
    floor = log_floor(series) if logx else None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for (_, values), legend in zip(series, cdf_labels(series, logx, unit), strict=True):
        data = sorted(_finite(values))
        if not data:
            continue
        if floor is not None:
            data = [max(v, floor) for v in data]
        ys = [(i + 1) / len(data) for i in range(len(data))]
        ax.step(data, ys, where="post", label=legend)
    if logx:
        ax.set_xscale("log")
    if floor is not None:
        ax.axvline(floor, color="grey", linestyle=":", linewidth=1)
        label = f" at or below 0 {unit}: drawn at {floor:g} {unit}"
        ax.text(floor, 0.05, label, rotation=90, va="bottom", color="grey", fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of samples")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def cdf_labels(
    series: Sequence[tuple[str, Sequence[float]]], logx: bool = True, unit: str = "ms"
) -> list[str]:
    """The legend cdf() gives each series: its label and n, every finite value (what
    results.summarize counts), and how many were drawn at the log axis's floor."""
    floor = log_floor(series) if logx else None
    labels = []
    for label, values in series:
        data = _finite(values)
        low = sum(1 for v in data if v <= 0) if floor is not None else 0
        at = "at 0" if all(v == 0 for v in data if v <= 0) else "at or below 0"
        drawn = f", {low} {at} {unit} drawn at {floor:g} {unit}" if low else ""
        labels.append(f"{label} (n={len(data)}{drawn})")
    return labels


def log_floor(series: Sequence[tuple[str, Sequence[float]]]) -> float | None:
    """Where a log axis draws the values at or below zero: a power of ten a decade below the
    smallest positive value of all the series (None when there are none to draw)."""
    values = [v for _, vs in series for v in _finite(vs)]
    if not any(v <= 0 for v in values):
        return None
    positive = [v for v in values if v > 0]
    smallest = min(positive) if positive else 1.0
    return 10.0 ** (math.floor(math.log10(smallest)) - 1)


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def bars(
    path: Path,
    title: str,
    ylabel: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    notes: Sequence[Sequence[str]] | None = None,
    hline: tuple[float, str] | None = None,
) -> str:
    """Grouped bars: one bar per series in each group. `notes` (per series, per group) are
    written above the bars; `hline` draws a labelled limit across the plot."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [g + i * width for g in range(len(groups))]
        drawn = ax.bar(xs, values, width, label=label)
        if notes is not None and i < len(notes):
            ax.bar_label(drawn, labels=list(notes[i]), fontsize=8, padding=2)
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle=":", linewidth=1)
        ax.text(-0.4, hline[0], f" {hline[1]}", va="bottom", color="grey", fontsize=8)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def stacked_bars(
    path: Path,
    title: str,
    xlabel: str,
    bars: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
) -> str:
    """Horizontal bars, one per label in `bars`, each stacked from `series` (label, one value
    per bar); series that are zero on every bar are left out of the legend."""
    fig, ax = plt.subplots(figsize=(8, 1.8 + 0.7 * len(bars)), dpi=110)
    ys = list(range(len(bars)))
    left = [0.0] * len(bars)
    for label, values in series:
        if not any(values):
            continue
        ax.barh(ys, values, 0.6, left=left, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, total in zip(ys, left, strict=True):
        ax.text(total, y, f" {total:.3g}", va="center", fontsize=8)
    ax.set_yticks(ys, bars, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.3)
    # Below the axes: inside, it would hide the end of the longest bar.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path.name
