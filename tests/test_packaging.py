"""Agora installs as one import package, `agora`, and runs from outside the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A plain (non-editable) install of the checkout into an empty folder."""
    target = tmp_path_factory.mktemp("site")
    # pip builds in the source tree (build/, *.egg-info): build from a copy, not the checkout.
    source = tmp_path_factory.mktemp("src") / "agora"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "results"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--target", str(target), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def run_outside(target: Path, *argv: str) -> subprocess.CompletedProcess:
    # The dependencies come from the test's environment; agora itself only from `target`.
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run(
        argv, cwd=target.parent, env=env, capture_output=True, text=True, timeout=60
    )


def test_install_adds_one_top_level_package(installed):
    # The old layout installed `common`, `cli`, `master`, `agent` and `frameworks` at top level.
    tops = sorted(
        p.name
        for p in installed.iterdir()
        if not p.name.endswith(".dist-info") and p.name != "bin"  # bin/: the `agora` script
    )
    assert tops == ["agora"], tops


def test_installed_package_imports_every_part_from_the_install(installed):
    code = (
        "import agora, agora.master, agora.master.allocator, agora.agent, agora.common, "
        "agora.frameworks.sdk, agora.frameworks.batch, agora.frameworks.service, agora.cli.main, "
        "agora.v1.scheduler_pb2_grpc, agora.sdk\n"
        "from agora.sdk import Framework, TaskSpec, run\n"
        "assert agora.sdk.Framework is agora.frameworks.sdk.Framework\n"
        "import agora.master.dashboard.app as d; assert (d.STATIC / 'app.js').is_file()\n"
        "print(agora.master.__file__)"
    )
    result = run_outside(installed, sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(installed / "agora" / "master")), result.stdout


def test_installed_command_runs_help(installed):
    result = run_outside(installed, str(installed / "bin" / "agora"), "--help")
    assert result.returncode == 0, result.stderr
    assert "two-level resource-offer cluster manager" in result.stdout
