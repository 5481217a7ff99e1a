"""In-place rewrites of small checkpoint files (agora.agent.atomic_files.overwrite_json)."""

from __future__ import annotations

import json

from agora.agent.atomic_files import IN_PLACE_MAX, atomic_write_json, overwrite_json
from agora.agent.checkpoint import TaskRecord, WorkDir


def test_overwrite_json_replaces_longer_and_shorter_content(tmp_path):
    path = tmp_path / "f.json"
    assert not overwrite_json(path, {"a": 1})  # no file yet: the caller creates it
    atomic_write_json(path, {"a": "x" * 100})
    assert overwrite_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert overwrite_json(path, {"c": "y" * 300})
    assert json.loads(path.read_text()) == {"c": "y" * 300}
    assert not overwrite_json(path, {"d": "z" * IN_PLACE_MAX})
    assert json.loads(path.read_text()) == {"c": "y" * 300}


def test_records_saved_in_place_load_back(tmp_path):
    work = WorkDir(tmp_path)
    record = TaskRecord(run_id="run-1", framework_id="fw", task="", sandbox="/s", state=1)
    work.save_record(record, durable=False)  # created: no file to rewrite yet
    record.state, record.cgroups = 2, ["/sys/fs/cgroup/agora/run-1"]
    work.save_record(record, durable=False)
    record.state, record.cgroups = 3, []
    work.save_record(record, durable=False)
    assert work.load_records() == [record]


def test_a_run_is_prepared_with_its_record_and_room_and_removed_whatever_it_holds(tmp_path):
    work = WorkDir(tmp_path)
    record = TaskRecord(run_id="run-1", framework_id="fw", task="", sandbox="/s", state=6)
    work.prepare_run(record)
    run_dir = work.run_dir("run-1")
    assert sorted(p.name for p in run_dir.iterdir()) == ["exit.json", "task.json", "wrapper.json"]
    assert work.load_records() == [record]
    # The placeholders read as "nothing recorded yet" and take the room of a later record.
    assert json.loads((run_dir / "exit.json").read_text()) == {}
    assert (run_dir / "exit.json").stat().st_size >= 512
    work.remove_run("run-1")
    assert not run_dir.exists()
    # A run dir holding something unexpected still goes.
    work.prepare_run(TaskRecord(run_id="run-2", framework_id="fw", task="", sandbox="/s"))
    (work.run_dir("run-2") / ".task.json.tmp").write_text("{")
    (work.run_dir("run-2") / "core").mkdir()
    work.remove_run("run-2")
    assert not work.run_dir("run-2").exists()
    work.remove_run("run-3")  # gone already: nothing to do


def test_a_sandbox_is_made_with_its_logs_and_a_new_one_for_a_task_id_run_again(tmp_path):
    work = WorkDir(tmp_path)
    first = work.new_sandbox("fw", "t1")
    second = work.new_sandbox("fw", "t1")
    assert (first.name, second.name) == ("t1", "t1.2")
    for sandbox in (first, second):
        assert sorted(p.name for p in sandbox.iterdir()) == ["stderr", "stdout"]
        assert sandbox.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "sandboxes" / "fw").stat().st_mode & 0o777 == 0o711
