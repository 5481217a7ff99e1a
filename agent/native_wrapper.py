"""The C task wrapper (agent/task_wrapper.c): built once per machine and user, then spawned by
the launcher for each task instead of a forked Python wrapper (agent/executor.py).

A forked Python wrapper costs a task about 3 ms of CPU, most of it the copy-on-write faults of
the launcher's heap; the C one is spawned without copying anything. It is compiled on first
use with the system's C compiler into a private cache (~/.cache/agora, mode 0700), named by
its source's hash so that an upgrade builds the new one. Where no compiler is found, or the
build fails, the launcher forks Python wrappers as before: same protocol, same files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

SOURCE = Path(__file__).with_name("task_wrapper.c")
# Set to "0" to use the Python wrapper (the reference implementation) even where C is built.
ENV_SWITCH = "AGORA_NATIVE_WRAPPER"


def _cache_dir() -> Path | None:
    """A directory only this user may write to, for the built wrapper; None if none is safe."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agora"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = base.stat()
    except OSError:
        return None
    # Others able to write here could replace what the agent (maybe root) runs for every task.
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        log.warning("not building the C task wrapper: its cache is not private", cache=str(base))
        return None
    return base


def wrapper_path() -> str | None:
    """The built wrapper, building it now if needed; None to use the Python wrapper."""
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    try:
        source = SOURCE.read_bytes()
    except OSError:
        return None
    cache = _cache_dir()
    compiler = shutil.which("cc") or shutil.which("gcc")
    if cache is None:
        return None
    target = cache / f"agora-task-wrapper-{hashlib.sha256(source).hexdigest()[:16]}"
    if os.access(target, os.X_OK):
        return str(target)
    if compiler is None:
        log.info("no C compiler: tasks get the Python wrapper (about 3 ms more CPU a task)")
        return None
    # Built beside its final name and renamed: agents starting together never run half a file.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        subprocess.run(
            [compiler, "-O2", "-Wall", "-o", str(tmp), str(SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        os.replace(tmp, target)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        log.warning(
            "cannot build the C task wrapper: tasks get the Python wrapper",
            error=str(e),
            detail=detail.decode(errors="replace")[-500:],
        )
        tmp.unlink(missing_ok=True)
        return None
    return str(target)
