"""Task states every component agrees on: which ones are final, and which mean "gone"."""

from __future__ import annotations

from agora.v1 import common_pb2

# After one of these a task never changes again, and its resources are back with the master.
# (UNREACHABLE is not final: a partition-aware framework may see the task come back.)
TERMINAL_STATES = frozenset(
    {
        common_pb2.TASK_FINISHED,
        common_pb2.TASK_FAILED,
        common_pb2.TASK_KILLED,
        common_pb2.TASK_ERROR,
        common_pb2.TASK_LOST,
        common_pb2.TASK_DROPPED,
        common_pb2.TASK_GONE,
    }
)


# What the master answers for a task it no longer has (or cannot reach): for a framework that
# tracks the task, it is gone, though it never ended as far as anyone saw.
GONE_STATES = frozenset({common_pb2.TASK_UNKNOWN, common_pb2.TASK_UNREACHABLE})

# From a framework's side a task is over when it ended or is gone: it will launch it again.
OVER_STATES = TERMINAL_STATES | GONE_STATES

# The reason of a TASK_KILLED that nobody's framework asked for: its agent was drained for
# maintenance and the drain's deadline passed. Not the task's fault: run it again elsewhere.
REASON_AGENT_DRAINED = "REASON_AGENT_DRAINED"
# Stopped for another role the cluster owed resources to (master/preemptions.py): not the
# task's fault either.
REASON_PREEMPTED = "REASON_PREEMPTED"


def is_terminal(state: int) -> bool:
    return state in TERMINAL_STATES


def is_over(state: int) -> bool:
    """Ended or gone (see OVER_STATES)."""
    return state in OVER_STATES
