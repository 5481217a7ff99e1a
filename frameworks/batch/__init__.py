"""The batch framework: jobs of N instances queued, placed on offers, retried, persisted.

`BatchDaemon(BatchConfig(master=...))` serves the `Batch` gRPC API and runs the framework;
`agora batch` is its command line and `agora job` its client.
"""

from agora.frameworks.batch.client import find_batch_address
from agora.frameworks.batch.daemon import BatchConfig, BatchDaemon
from agora.frameworks.batch.queue import DEFAULT_POLICY, POLICIES, QueuedJob, get_policy, order
from agora.frameworks.batch.scheduler import BatchScheduler, JobEnded, UnknownJob
from agora.frameworks.batch.store import JobStore
from agora.frameworks.batch.validation import SpecError, validate_spec

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "BatchConfig",
    "BatchDaemon",
    "BatchScheduler",
    "JobEnded",
    "JobStore",
    "QueuedJob",
    "SpecError",
    "UnknownJob",
    "find_batch_address",
    "get_policy",
    "order",
    "validate_spec",
]
