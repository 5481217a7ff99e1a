"""BatchDaemon: serves the Batch API and runs the batch framework against the master."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import grpc

from agora.common import UNRESERVED
from agora.common.credentials import INSECURE, Credentials, check_listen
from agora.common.leader import FollowingStub
from agora.common.masters import parse_masters
from agora.common.rpc import service_name
from agora.frameworks.batch.cron import Cron
from agora.frameworks.batch.queue import DEFAULT_POLICY, get_policy
from agora.frameworks.batch.refusals import (
    DECLINE_REFUSE_SECONDS,
    IDLE_REFUSE_SECONDS,
    UNFIT_REFUSE_SECONDS,
)
from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.service import BatchService
from agora.frameworks.batch.state import Backoff
from agora.frameworks.batch.store import JobStore
from agora.frameworks.sdk import FrameworkDaemon
from agora.v1 import batch_pb2, batch_pb2_grpc

SERVICE_NAMES = [service_name(batch_pb2, "Batch")]
FORGET_EVERY_SECONDS = 60.0


@dataclass
class BatchConfig:
    master: str  # host:port of the master
    host: str = "127.0.0.1"  # where the Batch API listens
    port: int = 0  # 0 picks a free port; clients find it through the master anyway
    # SQLite state (jobs, framework id) lives here; None keeps it in memory (a restart forgets).
    state_dir: Path | str | None = None
    queue: str = DEFAULT_POLICY  # fifo, priority or sjf
    role: str = UNRESERVED
    name: str = "batch"
    # How long the master keeps our tasks running while this daemon is away (a restart).
    failover_timeout: float = 7 * 24 * 3600.0
    # The address published to the master for clients; defaults to host (or this machine's
    # name when bound to all interfaces).
    advertise_host: str | None = None
    # Mutual TLS to the master and on the API when secure; --insecure to listen beyond
    # loopback without it.
    credentials: Credentials = INSECURE
    insecure: bool = False
    # Who may use the API (common/acls.py: submit_jobs, manage_apps); None: anyone.
    acls_path: Path | str | None = None
    # The Unix user tasks run as unless they name one; None: the user running the daemon.
    user: str | None = None
    # Prometheus metrics at http://host:metrics_port/metrics; None: not served (0: any port).
    metrics_port: int | None = None
    retry_backoff_seconds: float = 1.0  # before the first retry; doubles up to the max
    retry_backoff_max_seconds: float = 60.0
    # How long what we refuse (an offer we cannot use, what a launch leaves of one) stays
    # refused while work waits; refusals.py says why no launch waits on it.
    decline_refuse_seconds: float = DECLINE_REFUSE_SECONDS
    # ... and offers too small for every waiting instance (refusals.py).
    unfit_refuse_seconds: float = UNFIT_REFUSE_SECONDS
    # How long a waiting gang's hold (Scheduler.Hold) collects resources; 0: no holds.
    gang_hold_seconds: float = 120.0
    max_finished_jobs: int = 10_000  # finished jobs remembered, the oldest forgotten first
    # ... and for at most this long after they ended (`agora job history`); 0: no time bound.
    keep_finished_seconds: float = 30 * 24 * 3600.0
    # How long offers are refused while nothing waits (we also suppress then).
    idle_refuse_seconds: float = IDLE_REFUSE_SECONDS

    def validate(self) -> None:
        parse_masters(self.master)  # any --master form; MasterSpecError is a ValueError
        check_listen("the batch framework", self.host, self.credentials, self.insecure)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        get_policy(self.queue)
        for name in (
            "failover_timeout",
            "retry_backoff_seconds",
            "retry_backoff_max_seconds",
            "decline_refuse_seconds",
            "unfit_refuse_seconds",
            "idle_refuse_seconds",
            "gang_hold_seconds",
            "keep_finished_seconds",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be 0 or more seconds, got {value}")

    @property
    def state_path(self) -> Path | None:
        return None if self.state_dir is None else Path(self.state_dir) / "batch.sqlite3"


class BatchDaemon(FrameworkDaemon):
    """The Batch API and the batch scheduler, subscribed to the master as one framework."""

    kind = "batch"
    # Agents with GPUs are offered to frameworks that say they can use them (as in Mesos); the
    # placement keeps them for jobs that ask for GPUs (placement.py).
    # Revocable offers too: `--revocable` jobs may run on them (scheduler._use_lent).
    capabilities = ("GPU_RESOURCES", "REVOCABLE_RESOURCES")
    service_names = SERVICE_NAMES
    config: BatchConfig
    store: JobStore | None
    scheduler: BatchScheduler | None

    def __init__(self, config: BatchConfig) -> None:
        super().__init__(config)
        self.config = config  # typed as BatchConfig
        self._operator: FollowingStub | None = None
        self.cron: Cron | None = None

    def _open(self, operator: FollowingStub) -> None:
        """Loads the jobs."""
        config = self.config
        self.store = JobStore(self.state_source)
        self.scheduler = BatchScheduler(
            self.store,
            policy=config.queue,
            role=config.role,
            backoff=Backoff(config.retry_backoff_seconds, 2.0, config.retry_backoff_max_seconds),
            decline_refuse_seconds=config.decline_refuse_seconds,
            unfit_refuse_seconds=config.unfit_refuse_seconds,
            idle_refuse_seconds=config.idle_refuse_seconds,
            max_finished_jobs=config.max_finished_jobs,
            gang_hold_seconds=config.gang_hold_seconds,
            keep_finished_seconds=config.keep_finished_seconds,
        )
        from prometheus_client import Histogram

        queue_wait = Histogram(
            "agora_batch_queue_wait_seconds",
            "From a job's submission to the first launch of each of its instances.",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600),
            registry=self.metrics_registry,
        )
        self.scheduler.observe_queue_wait = queue_wait.observe
        self.cron = Cron(self.scheduler, self.store)
        self._operator = operator

    def _add_services(self, server: grpc.aio.Server) -> None:
        assert self.scheduler is not None and self._operator is not None
        batch_pb2_grpc.add_BatchServicer_to_server(
            BatchService(self.scheduler, self._operator, self.authorize, self.cron), server
        )

    def _start_background(self) -> list[asyncio.Task]:
        assert self.cron is not None
        return [
            asyncio.create_task(self.cron.run(), name="batch-cron"),
            asyncio.create_task(self._forget_old_jobs(), name="batch-history"),
        ]

    async def _forget_old_jobs(self) -> None:
        """Finished jobs past their time are forgotten even when no job is submitted."""
        assert self.scheduler is not None
        while True:
            await asyncio.sleep(FORGET_EVERY_SECONDS)
            self.scheduler.forget_old_jobs(by_age=True)

    def _summary(self) -> dict:
        assert self.scheduler is not None
        assert self.cron is not None
        return {
            "queue": self.config.queue,
            "jobs": len(self.scheduler.jobs),
            "schedules": len(self.cron.schedules),
        }

    def _metric_families(self) -> list:
        """Jobs and instances by state, and how long instances waited to be launched."""
        from prometheus_client.core import GaugeMetricFamily

        assert self.scheduler is not None
        jobs = {batch_pb2.JobState.Name(s): 0 for s in batch_pb2.JobState.values() if s}
        instances = {
            batch_pb2.InstanceState.Name(s): 0 for s in batch_pb2.InstanceState.values() if s
        }
        for job in self.scheduler.jobs.values():
            jobs[batch_pb2.JobState.Name(job.state)] += 1
            for instance in job.instances:
                instances[batch_pb2.InstanceState.Name(instance.state)] += 1
        by_job = GaugeMetricFamily("agora_batch_jobs", "Jobs by state.", labels=["state"])
        for state, n in jobs.items():
            by_job.add_metric([state], n)
        by_instance = GaugeMetricFamily(
            "agora_batch_instances", "Job instances by state.", labels=["state"]
        )
        for state, n in instances.items():
            by_instance.add_metric([state], n)
        return [by_job, by_instance]

    def _framework_removed(self, message: str) -> None:
        # The jobs stay; their lost tasks are retried like any failure.
        assert self.scheduler is not None
        self.scheduler.forget_tasks(f"framework removed by the master: {message}")

    def _stopped_hook(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
