"""BatchDaemon: serves the Batch API and runs the batch framework against the master."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import grpc

from agora.common import UNRESERVED
from agora.common.credentials import INSECURE, Credentials, check_listen
from agora.common.masters import parse_masters
from agora.common.rpc import service_name
from agora.frameworks.batch.queue import DEFAULT_POLICY, get_policy
from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.service import BatchService
from agora.frameworks.batch.state import Backoff
from agora.frameworks.batch.store import JobStore
from agora.frameworks.sdk import FrameworkDaemon
from agora.v1 import batch_pb2, batch_pb2_grpc, operator_pb2_grpc

SERVICE_NAMES = [service_name(batch_pb2, "Batch")]


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
    retry_backoff_seconds: float = 1.0  # before the first retry; doubles up to the max
    retry_backoff_max_seconds: float = 60.0
    decline_refuse_seconds: float = 1.0  # unusable offers while work waits
    idle_refuse_seconds: float = 15.0  # offers while nothing waits (we also suppress;
    # bounded, so that a revive lost on the way costs seconds, not minutes)

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
            "idle_refuse_seconds",
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
    service_names = SERVICE_NAMES
    store: JobStore | None
    scheduler: BatchScheduler | None

    def __init__(self, config: BatchConfig) -> None:
        super().__init__(config)
        self.config = config  # typed as BatchConfig
        self._operator: operator_pb2_grpc.OperatorStub | None = None

    def _open(self, operator: operator_pb2_grpc.OperatorStub) -> None:
        """Loads the jobs."""
        config = self.config
        self.store = JobStore(config.state_path)
        self.scheduler = BatchScheduler(
            self.store,
            policy=config.queue,
            role=config.role,
            backoff=Backoff(config.retry_backoff_seconds, 2.0, config.retry_backoff_max_seconds),
            decline_refuse_seconds=config.decline_refuse_seconds,
            idle_refuse_seconds=config.idle_refuse_seconds,
        )
        self._operator = operator

    def _add_services(self, server: grpc.aio.Server) -> None:
        assert self.scheduler is not None and self._operator is not None
        batch_pb2_grpc.add_BatchServicer_to_server(
            BatchService(self.scheduler, self._operator), server
        )

    def _summary(self) -> dict:
        assert self.scheduler is not None
        return {"queue": self.config.queue, "jobs": len(self.scheduler.jobs)}

    def _framework_removed(self, message: str) -> None:
        # The jobs stay; their lost tasks are retried like any failure.
        assert self.scheduler is not None
        self.scheduler.forget_tasks(f"framework removed by the master: {message}")

    def _stopped_hook(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
