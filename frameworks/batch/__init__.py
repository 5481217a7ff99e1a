"""The batch framework: jobs of N instances queued, placed on offers, retried, persisted.

`BatchDaemon(BatchConfig(master=...))` serves the `Batch` gRPC API and runs the framework;
`agora batch` is its command line and `agora job` its client.

Each name loads its module on first use (agora.common.lazy): `agora job`, which reads
`agora.frameworks.batch.client`, loads neither the daemon, the scheduler nor the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common.lazy import exports_on_first_use

if TYPE_CHECKING:
    from agora.frameworks.batch.client import BatchClient, find_batch_address
    from agora.frameworks.batch.daemon import BatchConfig, BatchDaemon
    from agora.frameworks.batch.queue import DEFAULT_POLICY, POLICIES, QueuedJob, get_policy, order
    from agora.frameworks.batch.refusals import DECLINE_REFUSE_SECONDS, IDLE_REFUSE_SECONDS
    from agora.frameworks.batch.scheduler import (
        BatchScheduler,
        JobEnded,
        StoreUnavailable,
        UnknownJob,
    )
    from agora.frameworks.batch.store import JobStore
    from agora.frameworks.batch.validation import SpecError, validate_spec
else:
    __getattr__, __dir__ = exports_on_first_use(
        __name__,
        {
            "agora.frameworks.batch.client": ("BatchClient", "find_batch_address"),
            "agora.frameworks.batch.daemon": ("BatchConfig", "BatchDaemon"),
            "agora.frameworks.batch.queue": (
                "DEFAULT_POLICY",
                "POLICIES",
                "QueuedJob",
                "get_policy",
                "order",
            ),
            "agora.frameworks.batch.refusals": ("DECLINE_REFUSE_SECONDS", "IDLE_REFUSE_SECONDS"),
            "agora.frameworks.batch.scheduler": (
                "BatchScheduler",
                "JobEnded",
                "StoreUnavailable",
                "UnknownJob",
            ),
            "agora.frameworks.batch.store": ("JobStore",),
            "agora.frameworks.batch.validation": ("SpecError", "validate_spec"),
        },
    )

__all__ = [
    "DECLINE_REFUSE_SECONDS",
    "DEFAULT_POLICY",
    "IDLE_REFUSE_SECONDS",
    "POLICIES",
    "BatchConfig",
    "BatchDaemon",
    "BatchScheduler",
    "JobEnded",
    "JobStore",
    "QueuedJob",
    "SpecError",
    "StoreUnavailable",
    "UnknownJob",
    "BatchClient",
    "find_batch_address",
    "get_policy",
    "order",
    "validate_spec",
]
