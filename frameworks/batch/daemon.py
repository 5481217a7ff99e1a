"""BatchDaemon: serves the Batch API and runs the batch framework against the master."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog
from agora.v1 import batch_pb2, batch_pb2_grpc, operator_pb2_grpc

from common import UNRESERVED
from common.rpc import (
    add_standard_services,
    insecure_channel,
    new_server,
    parse_address,
    service_name,
)
from frameworks.batch.queue import DEFAULT_POLICY, get_policy
from frameworks.batch.scheduler import BatchScheduler
from frameworks.batch.service import BatchService
from frameworks.batch.state import Backoff
from frameworks.batch.store import JobStore
from frameworks.sdk import (
    Backoff as ReconnectBackoff,
)
from frameworks.sdk import (
    Driver,
    GrpcSchedulerTransport,
    SubscriptionEnded,
    framework_info,
)

log = structlog.get_logger(__name__)

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
    retry_backoff_seconds: float = 1.0  # before the first retry; doubles up to the max
    retry_backoff_max_seconds: float = 60.0
    decline_refuse_seconds: float = 1.0  # unusable offers while work waits
    idle_refuse_seconds: float = 15.0  # offers while nothing waits (we also suppress;
    # bounded, so that a revive lost on the way costs seconds, not minutes)

    def validate(self) -> None:
        parse_address(self.master)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        get_policy(self.queue)
        for name in ("failover_timeout", "retry_backoff_seconds", "retry_backoff_max_seconds",
                     "decline_refuse_seconds", "idle_refuse_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be 0 or more seconds, got {value}")

    @property
    def state_path(self) -> Path | None:
        return None if self.state_dir is None else Path(self.state_dir) / "batch.sqlite3"


class BatchDaemon:
    def __init__(self, config: BatchConfig) -> None:
        config.validate()
        self.config = config
        self.store: JobStore | None = None
        self.scheduler: BatchScheduler | None = None
        self.driver: Driver | None = None
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._driver_task: asyncio.Task | None = None
        self._stopping = False
        self._closed = asyncio.Event()

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("the batch daemon is not started")
        return f"{self.config.host}:{self.port}"

    @property
    def service_address(self) -> str:
        """What clients dial, as published to the master."""
        host = self.config.advertise_host or self.config.host
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    async def start(self) -> int:
        """Loads the jobs, binds the Batch API, and subscribes to the master."""
        config = self.config
        self.store = JobStore(config.state_path)
        self.scheduler = BatchScheduler(
            self.store, policy=config.queue, role=config.role,
            backoff=Backoff(config.retry_backoff_seconds, 2.0, config.retry_backoff_max_seconds),
            decline_refuse_seconds=config.decline_refuse_seconds,
            idle_refuse_seconds=config.idle_refuse_seconds)
        self._channel = insecure_channel(config.master)
        server = new_server()
        batch_pb2_grpc.add_BatchServicer_to_server(
            BatchService(self.scheduler, operator_pb2_grpc.OperatorStub(self._channel)), server)
        add_standard_services(server, SERVICE_NAMES)
        port = server.add_insecure_port(f"{config.host}:{config.port}")
        if port == 0:
            self.store.close()
            raise OSError(f"cannot bind {config.host}:{config.port}")
        await server.start()
        self._server, self.port = server, port
        self._driver_task = asyncio.create_task(self._run_framework(), name="batch-framework")
        log.info("batch daemon started", address=self.address, queue=config.queue,
                 jobs=len(self.scheduler.jobs), framework_id=self.scheduler.framework_id or None,
                 state=str(config.state_path or "memory"))
        return port

    async def _run_framework(self) -> None:
        """Runs the driver; if the master tore the framework down, starts afresh (the jobs
        stay, their lost tasks are retried)."""
        assert self.scheduler is not None
        backoff = ReconnectBackoff()
        while not self._stopping:
            info = framework_info(self.config.name, role=self.config.role,
                                  failover_timeout=self.config.failover_timeout,
                                  service_address=self.service_address,
                                  framework_id=self.scheduler.framework_id)
            self.driver = Driver(self.scheduler, GrpcSchedulerTransport(self.config.master), info)
            self.scheduler.driver = self.driver
            try:
                await self.driver.run()
                return
            except SubscriptionEnded as e:
                if self._stopping:
                    return
                if "failed over" in e.message:
                    log.error("another batch scheduler took over this framework; this daemon "
                              "no longer schedules", message=e.message)
                    return
                log.warning("the master ended the framework; subscribing afresh",
                            message=e.message)
                self.scheduler.forget_tasks(f"framework removed by the master: {e.message}")
                await asyncio.sleep(backoff.next_delay())
            except Exception:
                log.exception("batch framework driver failed; restarting it")
                await asyncio.sleep(backoff.next_delay())

    async def stop(self, grace: float = 1.0) -> None:
        """Stops serving and disconnects; the master keeps our tasks running for
        failover_timeout, so a restarted daemon takes them back."""
        if self._server is None:
            return
        self._stopping = True
        server, self._server = self._server, None
        await server.stop(grace)
        if self.driver is not None:
            self.driver.stop()
        if self._driver_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._driver_task, 10)
        if self.scheduler is not None:
            self.scheduler.close()
        if self._channel is not None:
            await self._channel.close()
        if self.store is not None:
            self.store.close()
        log.info("batch daemon stopped", address=self.address)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
