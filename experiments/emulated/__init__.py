"""Emulated agents: thousands of real-protocol agents in one process, for experiments.

Each speaks AgentLink to the real master over real gRPC but runs no processes: a task "runs"
for the duration it declares (label `agora.emulated/duration`, or a `sleep N` command) or the
fleet's default, with reliable STARTING/RUNNING/FINISHED updates.
`python -m agora.experiments.emulated` runs a fleet as its own process.
"""

from agora.experiments.emulated.agent import AgentSpec, AgentStats, EmulatedAgent, EmulatedTask
from agora.experiments.emulated.fleet import DEFAULT_RESOURCES, EmulatedFleet, FleetConfig
from agora.experiments.emulated.tasks import (
    DURATION_LABEL,
    EXIT_CODE_LABEL,
    constant,
    declared_duration,
    exponential,
)

__all__ = [
    "DEFAULT_RESOURCES",
    "DURATION_LABEL",
    "EXIT_CODE_LABEL",
    "AgentSpec",
    "AgentStats",
    "EmulatedAgent",
    "EmulatedFleet",
    "EmulatedTask",
    "FleetConfig",
    "constant",
    "declared_duration",
    "exponential",
]
