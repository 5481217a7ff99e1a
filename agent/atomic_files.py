"""Whole-file JSON writes that a crash cannot tear: temp file, fsync, rename.

Kept free of heavy imports: the task wrapper (agora.agent.executor) uses it and starts per task.
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


# A write of at most one page at offset 0 is never split: a process killed during it leaves
# the old content or the new, not a mix.
IN_PLACE_MAX = 4096


def overwrite_json(path: Path, data: object) -> bool:
    """Rewrites an existing small JSON file in place with one write: no new file, no rename.

    Creating and renaming files costs ~0.5 ms each on some disks; this costs microseconds.
    A crash of the writing process leaves the old or the new content (trailing spaces pad a
    shorter one); a crash of the machine may lose it, as with durable=False. Only for files
    no other process reads meanwhile. False (nothing written) when the file does not exist
    or either version is longer than IN_PLACE_MAX.
    """
    encoded = json.dumps(data).encode()
    if len(encoded) > IN_PLACE_MAX:
        return False
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size > IN_PLACE_MAX:
            return False
        os.pwrite(fd, encoded.ljust(size), 0)
    finally:
        os.close(fd)
    return True
