"""Rotating a task's stdout (agent/sandbox_watch.py `rotate`): the agent, root usually, does it in
a sandbox the task's user owns, so it must follow nothing the task could plant there."""

from __future__ import annotations

import os

from agora.agent.sandbox_watch import rotate


def test_a_log_past_its_limit_is_copied_to_dot_1_and_emptied(tmp_path):
    log = tmp_path / "stdout"
    log.write_text("x" * 2000)
    os.chmod(log, 0o640)
    assert rotate(log, 1000)
    assert log.read_text() == ""
    rotated = tmp_path / "stdout.1"
    assert rotated.read_text() == "x" * 2000
    assert (rotated.stat().st_uid, rotated.stat().st_mode & 0o777) == (log.stat().st_uid, 0o640)
    assert not rotate(log, 1000)  # under the limit now


def test_a_symlink_at_dot_1_is_replaced_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "stdout").write_text("A" * 2000)
    (sandbox / "stdout.1").symlink_to(victim)
    assert rotate(sandbox / "stdout", 1000)
    assert victim.read_text() == "precious\n"
    assert not (sandbox / "stdout.1").is_symlink()
    assert (sandbox / "stdout.1").read_text() == "A" * 2000


def test_a_log_that_is_a_symlink_or_a_second_link_is_not_rotated(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("secret " * 1000)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "stdout").symlink_to(victim)
    assert not rotate(sandbox / "stdout", 100)
    os.link(victim, sandbox / "stderr")
    assert not rotate(sandbox / "stderr", 100)
    assert victim.read_text() == "secret " * 1000  # neither emptied
    assert not (sandbox / "stdout.1").exists() and not (sandbox / "stderr.1").exists()


def test_a_fifo_in_place_of_the_log_does_not_hang_the_rotation(tmp_path):
    os.mkfifo(tmp_path / "stdout")
    assert not rotate(tmp_path / "stdout", 0)
