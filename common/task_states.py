"""Task states every component agrees on: which ones are final."""

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


def is_terminal(state: int) -> bool:
    return state in TERMINAL_STATES
