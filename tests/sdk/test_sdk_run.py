"""`run()`, as a framework written from the README calls it: Ctrl-C stops it cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually

pytestmark = pytest.mark.e2e

FRAMEWORK = """
import sys
from agora.sdk import Framework, TaskState, run

class Idle(Framework):
    async def on_subscribed(self, driver, framework_id):
        print("subscribed", TaskState.Name(TaskState.TASK_FINISHED), flush=True)

run(Idle(), master=sys.argv[1], name="idle")
"""


def test_ctrl_c_stops_a_framework_without_a_traceback(tmp_path):
    master = Daemon(
        ["master", "--port", "0", "--state-dir", str(tmp_path / "m")], tmp_path / "m.log"
    )
    master.start()
    try:
        script = tmp_path / "idle.py"
        script.write_text(FRAMEWORK)
        proc = subprocess.Popen(
            [sys.executable, str(script), master.address],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "subscribed TASK_FINISHED\n"  # TaskState comes from the SDK
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        eventually(lambda: "interrupted" in err, timeout=1, message="the interruption logged")
    finally:
        master.stop()
