"""Whole-file JSON writes that a crash cannot tear: temp file, fsync, rename.

Kept free of heavy imports: the task wrapper (agent.executor) uses it and starts per task.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def atomic_write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
