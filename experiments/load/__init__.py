"""Load frameworks for experiments: configurable demand on the real SDK, timed from inside.

recorder = Recorder()
framework = LoadFramework(LoadConfig(name="load-0", cpus=1, mem=128,
                                     duration=exponential(1.0), max_running=20), recorder)
await run_async(framework, master=address, name="load-0")
recorder.values("task_end_to_offer")   # milliseconds
"""

from agora.experiments.load.framework import (
    DURATION_LABEL,
    LoadConfig,
    LoadFramework,
    tasks_for_rate,
)
from agora.experiments.load.recorder import METRICS, Recorder, Sample
from agora.experiments.load.workload import (
    TraceTask,
    constant,
    exponential,
    load_trace,
    parse_duration,
)

__all__ = [
    "DURATION_LABEL",
    "METRICS",
    "LoadConfig",
    "LoadFramework",
    "Recorder",
    "Sample",
    "TraceTask",
    "constant",
    "exponential",
    "load_trace",
    "parse_duration",
    "tasks_for_rate",
]
