"""Whole-file JSON writes that a crash cannot tear: temp file, fsync, rename; or in place.

Kept free of heavy imports: the task wrapper (agora.agent.executor) uses it and starts per task.
"""

from __future__ import annotations

import json
import os


def atomic_write_json(path: str | os.PathLike, data: object, durable: bool = True) -> None:
    """Old or new content, never a mix. `durable=False` skips the fsync (milliseconds on a
    disk): the file then survives a crash of the writing process, not of the machine."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.tmp")
    # os-level calls: the agent writes several of these a task, and io.open's buffered file
    # costs more than the write itself.
    _write_new(tmp, json.dumps(data).encode(), durable)
    os.replace(tmp, path)


def _write_new(path: str, content: bytes, durable: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


# A write of at most one page at offset 0 is never split: a process killed during it leaves
# the old content or the new, not a mix.
IN_PLACE_MAX = 4096


# Room reserved for a file written later in place: the largest wrapper.json or exit.json.
PLACEHOLDER_SIZE = 512


def reserve_json(path: str | os.PathLike, size: int = PLACEHOLDER_SIZE) -> None:
    """Creates `path` as an empty JSON object padded to `size` bytes, to overwrite in place
    later (overwrite_json). Its space is taken now, so that the later write needs none: the
    wrapper can still record how a task ended when the task has filled the disk."""
    _write_new(os.fspath(path), b"{}".ljust(size))


def write_json_in_place(path: str | os.PathLike, data: object) -> None:
    """overwrite_json where a placeholder exists (reserve_json), else atomic_write_json."""
    if not overwrite_json(path, data):
        atomic_write_json(path, data, durable=False)


def overwrite_json(path: str | os.PathLike, data: object) -> bool:
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
