"""ServicesDaemon: serves the Services API and runs the service framework against the master."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog
from agora.v1 import operator_pb2, operator_pb2_grpc, services_pb2, services_pb2_grpc

from common import UNRESERVED, Resources, attributes_from_proto
from common.rpc import (
    add_standard_services,
    insecure_channel,
    new_server,
    parse_address,
    service_name,
)
from frameworks.sdk import Backoff as ReconnectBackoff
from frameworks.sdk import Driver, GrpcSchedulerTransport, SubscriptionEnded, framework_info
from frameworks.service.constraints import AgentFacts
from frameworks.service.placement import AgentSlot
from frameworks.service.scheduler import ServiceScheduler
from frameworks.service.servicer import ServicesServicer
from frameworks.service.store import ServiceStore

log = structlog.get_logger(__name__)

SERVICE_NAMES = [service_name(services_pb2, "Services")]


@dataclass
class ServicesConfig:
    master: str  # host:port of the master
    host: str = "127.0.0.1"  # where the Services API listens
    port: int = 0  # 0 picks a free port; clients find it through the master anyway
    # SQLite state (apps, instances, framework id); None keeps it in memory.
    state_dir: Path | str | None = None
    role: str = UNRESERVED
    name: str = "services"
    # How long the master keeps our tasks running while this daemon is away (a restart).
    failover_timeout: float = 7 * 24 * 3600.0
    # The host published to the master for clients; defaults to host (or this machine's name
    # when bound to all interfaces).
    advertise_host: str | None = None
    # Converge at least this often (it also runs after every change).
    converge_interval: float = 1.0
    # How often the list of agents (for placement explanations) is refreshed.
    catalog_interval: float = 2.0
    # An instance not RUNNING this long after its launch is killed and replaced.
    launch_timeout: float = 300.0

    def validate(self) -> None:
        parse_address(self.master)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        for name in ("failover_timeout", "converge_interval", "catalog_interval",
                     "launch_timeout"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")

    @property
    def state_path(self) -> Path | None:
        return None if self.state_dir is None else Path(self.state_dir) / "services.sqlite3"


class ServicesDaemon:
    def __init__(self, config: ServicesConfig) -> None:
        config.validate()
        self.config = config
        self.store: ServiceStore | None = None
        self.scheduler: ServiceScheduler | None = None
        self.driver: Driver | None = None
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._operator: operator_pb2_grpc.OperatorStub | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._closed = asyncio.Event()

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("the services daemon is not started")
        return f"{self.config.host}:{self.port}"

    @property
    def service_address(self) -> str:
        """What clients dial, as published to the master."""
        host = self.config.advertise_host or self.config.host
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    async def start(self) -> int:
        """Loads the apps, binds the Services API, and subscribes to the master."""
        config = self.config
        self.store = ServiceStore(config.state_path)
        self._channel = insecure_channel(config.master)
        self._operator = operator_pb2_grpc.OperatorStub(self._channel)
        self.scheduler = ServiceScheduler(self.store, role=config.role, catalog=self._catalog,
                                          launch_timeout=config.launch_timeout)
        server = new_server()
        services_pb2_grpc.add_ServicesServicer_to_server(ServicesServicer(self.scheduler), server)
        add_standard_services(server, SERVICE_NAMES)
        port = server.add_insecure_port(f"{config.host}:{config.port}")
        if port == 0:
            self.store.close()
            raise OSError(f"cannot bind {config.host}:{config.port}")
        await server.start()
        self._server, self.port = server, port
        self._tasks = [
            asyncio.create_task(self._run_framework(), name="services-framework"),
            asyncio.create_task(self.scheduler.run(config.converge_interval,
                                                   config.catalog_interval),
                                name="services-converge"),
        ]
        log.info("services daemon started", address=self.address, apps=len(self.scheduler.apps),
                 instances=len(self.scheduler.instances),
                 framework_id=self.store.framework_id() or None,
                 state=str(config.state_path or "memory"))
        return port

    async def _catalog(self) -> list[AgentSlot]:
        assert self._operator is not None
        reply = await self._operator.ListAgents(operator_pb2.ListAgentsRequest(), timeout=5)
        slots = []
        for agent in reply.agents:
            if agent.state == "DRAINING":
                continue
            info = agent.info
            facts = AgentFacts(info.agent_id, info.hostname,
                               attributes_from_proto(info.attributes))
            slots.append(AgentSlot(facts, Resources.from_proto(info.resources)))
        return slots

    async def _run_framework(self) -> None:
        """Runs the driver; if the master removed the framework, subscribes afresh (the apps
        stay; their lost tasks are replaced)."""
        assert self.scheduler is not None and self.store is not None
        backoff = ReconnectBackoff()
        while not self._stopping:
            info = framework_info(self.config.name, role=self.config.role,
                                  failover_timeout=self.config.failover_timeout,
                                  service_address=self.service_address,
                                  framework_id=self.store.framework_id())
            self.driver = Driver(self.scheduler, GrpcSchedulerTransport(self.config.master), info)
            try:
                await self.driver.run()
                return
            except SubscriptionEnded as e:
                if self._stopping:
                    return
                if "failed over" in e.message:
                    log.error("another services scheduler took over this framework; this "
                              "daemon no longer schedules", message=e.message)
                    return
                log.warning("the master ended the framework; subscribing afresh",
                            message=e.message)
                self.store.set_framework_id("")
                await asyncio.sleep(backoff.next_delay())
            except Exception:
                log.exception("services framework driver failed; restarting it")
                await asyncio.sleep(backoff.next_delay())

    async def stop(self, grace: float = 1.0) -> None:
        """Stops serving and disconnects; the master keeps our tasks running for
        failover_timeout, so a restarted daemon takes them back."""
        if self._server is None:
            return
        self._stopping = True
        server, self._server = self._server, None
        if self.scheduler is not None:
            self.scheduler.close_watchers()
        await server.stop(grace)
        if self.driver is not None:
            self.driver.stop()
        framework, converge = self._tasks
        converge.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(framework, 10)
        with contextlib.suppress(asyncio.CancelledError):
            await converge
        if self._channel is not None:
            await self._channel.close()
        if self.store is not None:
            self.store.close()
        log.info("services daemon stopped", address=self.address)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
