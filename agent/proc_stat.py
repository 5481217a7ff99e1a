"""A process's start time and state from /proc, with nothing but `os` (Linux).

The task wrapper records its own start time and the agent later checks it to tell the very
process it started from a new one that reuses the pid. Both sides use these functions, so the
two figures come from the same formula (boot time + start ticks, as psutil's create_time). The
wrapper is forked per task from a small launcher; importing psutil there made every fork
copy a larger process and cost ~0.4 ms per call.
"""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_boot_time: float | None = None


def boot_time() -> float:
    """Seconds since the epoch at which the machine booted (/proc/stat btime)."""
    global _boot_time
    if _boot_time is None:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    _boot_time = float(line.split()[1])
                    break
            else:
                raise OSError("no btime line in /proc/stat")
    return _boot_time


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return data[data.rindex(b")") + 2 :].split()


def start_time(pid: int) -> float | None:
    """When the process started (seconds since the epoch), or None if there is no such pid."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    # Field 22 of stat is starttime; fields[0] here is field 3 (state).
    return boot_time() + int(fields[19]) / _CLOCK_TICKS


def is_running(pid: int, started: float, slack: float) -> bool:
    """True while `pid` is the process that started at `started` and is not a zombie."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    if abs(boot_time() + int(fields[19]) / _CLOCK_TICKS - started) > slack:
        return False
    return fields[0] not in (b"Z", b"X")
