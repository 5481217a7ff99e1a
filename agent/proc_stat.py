"""A process's start and state from /proc, with nothing but `os` (Linux).

The task wrapper records when it started and the agent later checks it to tell the very process
it started from a new one that reuses the pid. The check compares start ticks (clock ticks
since boot, /proc/PID/stat field 22): a step of the wall clock (NTP, a resumed VM) moves the
boot time /proc/stat reports, so times derived from it stop matching, while ticks do not.
Wall-clock start times are still recorded, for people and for records of older agents (which
stored only those). The wrapper is forked per task from a small launcher; importing psutil
there made every fork copy a larger process and cost ~0.4 ms per call.
"""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def boot_time() -> float:
    """Seconds since the epoch at which the machine booted, by the current wall clock."""
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError("no btime line in /proc/stat")


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return data[data.rindex(b")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; None if there is no such pid."""
    fields = _stat_fields(pid)
    # Field 22 of stat is starttime; fields[0] here is field 3 (state).
    return None if fields is None else int(fields[19])


def ticks_to_time(ticks: int) -> float:
    """Start ticks as seconds since the epoch (psutil's create_time), by the current clock."""
    return boot_time() + ticks / _CLOCK_TICKS


def is_running(
    pid: int, ticks: int | None = None, started: float | None = None, slack: float = 0.05
) -> bool:
    """True while `pid` is the process that started at `ticks` (or, without them, at wall
    time `started`, within `slack` seconds) and is not a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    if ticks is not None:
        return int(fields[19]) == ticks
    if started is not None:
        return abs(ticks_to_time(int(fields[19])) - started) <= slack
    return True
