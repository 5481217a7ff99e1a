"""The batch framework: jobs of N instances queued, placed on offers, retried, persisted.

`BatchDaemon(BatchConfig(master=...))` serves the `Batch` gRPC API and runs the framework;
`agora batch` is its command line and `agora job` its client.
"""

from frameworks.batch.client import find_batch_address
from frameworks.batch.daemon import BatchConfig, BatchDaemon
from frameworks.batch.queue import DEFAULT_POLICY, POLICIES, QueuedJob, get_policy, order
from frameworks.batch.scheduler import BatchScheduler, JobEnded, UnknownJob
from frameworks.batch.store import JobStore
from frameworks.batch.validation import SpecError, validate_spec

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
