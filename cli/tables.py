"""The one table printer of the `agora` command: columns left-aligned to their widest cell."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The header and rows as lines of two-space-separated columns, without trailing spaces."""
    lines = [list(header), *[list(row) for row in rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
