"""Experiments leave nothing running: an emulated fleet exits promptly on SIGTERM, even while
its master is gone, and an experiment that is interrupted (Ctrl-C) or told to stop (SIGTERM)
stops every process it started."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
from harness import ROOT, Daemon, eventually


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_fleet_exits_on_sigterm_while_its_master_is_gone(tmp_path):
    master = Daemon(["master", "--port", "0"], tmp_path / "master.log").start()
    with open(tmp_path / "fleet.log", "ab") as log:
        fleet = subprocess.Popen(
            [sys.executable, "-m", "agora.experiments.emulated", "--master", master.address,
             "--agents", "300", "--stats-interval", "0"],
            stdout=subprocess.PIPE, stderr=log, cwd=ROOT, start_new_session=True, text=True,
        )  # fmt: skip
        try:
            assert fleet.stdout is not None
            assert json.loads(fleet.stdout.readline())["event"] == "ready"
            master.kill()  # gone: 300 agents dial it again and again
            time.sleep(1.0)
            fleet.send_signal(signal.SIGTERM)
            out, _ = fleet.communicate(timeout=60)  # exits (the fleet bounds its own stop)
            assert fleet.returncode == 0
            assert json.loads(out.splitlines()[-1])["event"] == "stopped"
        finally:
            if fleet.poll() is None:
                fleet.kill()
                fleet.communicate()


@pytest.mark.parametrize(
    ("sig", "twice"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["ctrl-c", "sigterm", "sigterm-during-clean-up"],
)
def test_an_interrupted_experiment_stops_every_process_it_started(tmp_path, sig, twice):
    run = subprocess.Popen(
        [sys.executable, "-m", "agora.cli.main", "experiment", "scale", "--agents", "3000",
         "--idle-seconds", "120", "--out", str(tmp_path / "out"), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True,
    )  # fmt: skip
    try:
        experiment = psutil.Process(run.pid)

        def started() -> list[psutil.Process]:
            kids = experiment.children(recursive=True)
            fleets = [p for p in kids if "agora.experiments.emulated" in " ".join(p.cmdline())]
            return kids if fleets and len(kids) >= 2 else []

        kids = eventually(started, timeout=60, message="the master and a fleet running")
        run.send_signal(sig)  # while the fleet registers: it is in no list of the run's yet
        if twice:  # again while the run stops its daemons: the clean-up is not cut short
            time.sleep(0.05)
            run.send_signal(sig)
        _, err = run.communicate(timeout=120)
        assert run.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], err
        assert "Traceback" not in err, err
        for kid in kids:
            eventually(lambda k=kid: _gone(k.pid), timeout=30, message=f"{kid.pid} gone")
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


def _python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def test_the_exit_sweep_stops_a_child_no_daemon_list_knows():
    """What `agora experiment` runs last: a child this process started but never recorded
    (a start cut short by a signal) is stopped with the daemons, and so are its children."""
    script = (
        "import subprocess, sys\n"
        "from agora.experiments.processes import stop_all_now\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        '\'import subprocess, time; subprocess.Popen(["sleep", "300"]); time.sleep(300)\'])\n'
        "import psutil, time\n"
        "while not psutil.Process(child.pid).children(): time.sleep(0.05)\n"
        "print(child.pid, psutil.Process(child.pid).children()[0].pid, flush=True)\n"
        "stop_all_now(grace=5, descendants=True)\n"
    )
    done = _python(script)
    assert done.returncode == 0, done.stderr
    pids = [int(word) for word in done.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        eventually(lambda p=pid: _gone(p), timeout=30, message=f"{pid} gone")


def test_sigterm_ends_a_run_as_stopped_even_if_the_experiment_swallows_the_cancellation():
    """An experiment that catches the cancellation and returns does not turn a SIGTERM into
    a finished run (exit 0, results written)."""
    script = (
        "import asyncio, os, signal\n"
        "from agora.cli import experiment_cmd\n"
        "async def stubborn():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        await asyncio.sleep(30)\n"
        "    except asyncio.CancelledError:\n"
        "        return 'finished anyway'\n"
        "try:\n"
        "    print(asyncio.run(experiment_cmd._run_and_clean_up(stubborn())))\n"
        "except experiment_cmd._Terminated:\n"
        "    print('stopped')\n"
    )
    done = _python(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
