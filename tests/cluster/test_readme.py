"""The README's "Write your own framework" section is a program: its code blocks, put in one
file as the README says, run against a real cluster and do what the README says they do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from harness import Cluster

from agora.experiments.readme_framework import framework_blocks

pytestmark = pytest.mark.e2e


def test_the_readme_framework_runs_as_written(tmp_path):
    blocks = framework_blocks()
    assert len(blocks) == 4, "the section shows the four parts of a framework"
    script = tmp_path / "hello.py"
    script.write_text("\n".join(blocks))
    cluster = Cluster(tmp_path)
    cluster.start_master()
    cluster.start_agent()
    try:
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env={**os.environ, "AGORA_MASTER": cluster.master.address},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert lines[-1] == "all done, 0 failed", result.stdout
        finished = {line.split(":")[0] for line in lines if ": FINISHED exited with code 0" in line}
        assert len(finished) == 5
        assert "Traceback" not in result.stderr
    finally:
        cluster.stop()
