"""The report lines a task wrapper writes when its launch is decided: one formatter, one parser.

Standard library only: the task wrapper imports it. A wrapper reports once, in ONE write
shorter than PIPE_BUF, which the kernel never interleaves with another wrapper's on the pipe
they share (the launcher's stdout, or the report pipe the agent keeps for the C wrappers it
spawns); each line starts with the run id there, and a one-shot wrapper's stdout, its own,
carries the report alone:

    RUN_ID started TASK_PID WRAPPER_PID WRAPPER_START START_TICKS   the command runs
    RUN_ID error MESSAGE                                            it does not, and why
    RUN_ID handed WRAPPER_PID START_TICKS                           (the launcher's own line:
                                                                    which spare took the run;
                                                                    "None" ticks: it ended)

WRAPPER_START is the wrapper's start in wall-clock seconds, START_TICKS its start in clock
ticks since boot (the pid-reuse guard: agora.agent.proc_stat). The C wrapper
(agent/task_wrapper.c, `report`) writes the same lines with its own printf; the tests parse
what it writes.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "MAX_REPORT",
    "Handed",
    "Refused",
    "Report",
    "Started",
    "format_report",
    "parse_line",
    "parse_report",
]

# Reports longer than this are cut: a pipe write up to PIPE_BUF (4096 on Linux) is atomic.
MAX_REPORT = 3000


class Started(NamedTuple):
    """The command runs: enough to watch its wrapper (agora.agent.launcher.Wrapper)."""

    task_pid: int  # also the task's process group id
    wrapper_pid: int
    wrapper_start: float  # wall clock
    start_ticks: int  # since boot


class Refused(NamedTuple):
    """The command was not started; the message says why, for the task's status."""

    message: str


class Handed(NamedTuple):
    """The launcher handed the run to this wrapper, which has not reported yet."""

    wrapper_pid: int
    start_ticks: int | None  # None: the wrapper had already ended when the launcher looked


Report = Started | Refused | Handed


def format_report(report: Report, run_id: str = "") -> bytes:
    """`report` as one line (with `run_id` before it, where the pipe is shared), cut to fit
    one atomic write."""
    match report:
        case Started(task_pid, wrapper_pid, start, ticks):
            # repr: the shortest text that reads back as the same float.
            text = f"started {task_pid} {wrapper_pid} {start!r} {ticks}"
        case Refused(message):
            text = f"error {message}"
        case Handed(wrapper_pid, ticks):
            text = f"handed {wrapper_pid} {ticks}"
    if run_id:
        text = f"{run_id} {text}"
    return text.replace("\n", " ").encode(errors="replace")[: MAX_REPORT - 1] + b"\n"


def parse_report(text: str) -> Report | None:
    """The report in `text` (no run id before it); None if it is not one."""
    word, _, rest = text.rstrip("\n").partition(" ")
    try:
        if word == "started":
            task_pid, wrapper_pid, start, ticks = rest.split()
            return Started(int(task_pid), int(wrapper_pid), float(start), int(ticks))
        if word == "error":
            return Refused(rest)
        if word == "handed":
            pid, ticks = rest.split()
            return Handed(int(pid), None if ticks == "None" else int(ticks))
    except ValueError:
        return None
    return None


def parse_line(line: bytes) -> tuple[str, Report | None]:
    """(run id, its report) from a line of a shared pipe; the report is None if unreadable."""
    run_id, _, text = line.decode(errors="replace").rstrip("\n").partition(" ")
    return run_id, parse_report(text)
