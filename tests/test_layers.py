"""The design's arrows, read from the source: who may import whom (DESIGN.md, "Layout").

protos <- common <- master, agent, frameworks <- the `agora` command; the lab (experiments) uses
the product through its public packages and the SDK, never the command's modules, and the
product never loads the lab but through `agora experiment` and `agora bench`. Every import
counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# folder -> the agora packages it must never import
FORBIDDEN = {
    "common": {"master", "agent", "frameworks", "cli", "experiments"},
    "master": {"agent", "frameworks", "cli", "experiments"},
    "agent": {"master", "frameworks", "cli", "experiments"},
    "frameworks": {"master", "agent", "cli", "experiments"},
    "experiments": {"cli"},
}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(second part of every agora.X... import, line) in a file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "agora" and len(parts) > 1:
                out.add((parts[1], node.lineno))
    return out


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_no_import_points_against_the_design(folder):
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for package, line in imported_packages(path):
            if package in FORBIDDEN[folder]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports agora.{package}")
    assert not wrong, "\n".join(wrong)


def test_only_the_experiment_and_bench_commands_load_the_lab():
    loaders = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "cli").glob("*.py"))
        if any(package == "experiments" for package, _ in imported_packages(path))
    ]
    assert loaders == ["cli/bench_cmd.py", "cli/experiment_cmd.py"]
