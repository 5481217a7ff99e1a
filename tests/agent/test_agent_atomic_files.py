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
