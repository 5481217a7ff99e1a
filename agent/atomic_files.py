"""Whole-file JSON writes that a crash cannot tear: temp file, fsync, rename.

Kept free of heavy imports: the task wrapper (agent.executor) uses it and starts per task.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def atomic_write_json(path: Path, data: object, durable: bool = True) -> None:
    """Old or new content, never a mix. `durable=False` skips the fsync (milliseconds on a
    disk): the file then survives a crash of the writing process, not of the machine."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
