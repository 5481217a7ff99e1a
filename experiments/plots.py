"""PNG plots with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

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
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle=":", linewidth=1)
        ax.text(ax.get_xlim()[0], hline[0], f" {hline[1]}", va="bottom", color="grey", fontsize=8)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
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


def cdf(
    path: Path,
    title: str,
    xlabel: str,
    series: Sequence[tuple[str, Sequence[float]]],
    logx: bool = True,
) -> str:
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, values in series:
        data = sorted(v for v in values if v > 0)
        if not data:
            continue
        ys = [(i + 1) / len(data) for i in range(len(data))]
        ax.step(data, ys, where="post", label=f"{label} (n={len(data)})")
    if logx:
        ax.set_xscale("log")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of samples")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


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
