"""The tree stays ruff-clean (lint and format), as `make lint` checks: CI runs this too."""

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
