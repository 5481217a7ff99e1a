"""The tree stays ruff-clean (lint, format) and mypy-clean, as `make lint` checks; CI runs this."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes():
    result = ruff("check", ".", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_applied():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout


def test_mypy_passes_over_the_installed_names(tmp_path):
    # The script lays out a tree of links as the installed package; a tree of this test's own,
    # so that a `make lint` running meanwhile does not pull it away.
    result = subprocess.run(
        ["sh", str(ROOT / "scripts" / "typecheck.sh")],
        cwd=ROOT,
        env={**os.environ, "TYPECHECK_TREE": str(tmp_path / "typecheck")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
