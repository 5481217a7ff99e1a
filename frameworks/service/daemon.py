"""ServicesDaemon: serves the Services API and runs the service framework against the master."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import grpc

from agora.common import UNRESERVED, Resources, attributes_from_proto
from agora.common.credentials import INSECURE, Credentials, check_listen
from agora.common.leader import FollowingStub
from agora.common.masters import parse_masters
from agora.common.rpc import service_name
from agora.frameworks.sdk import FrameworkDaemon
from agora.frameworks.sdk.constraints import AgentFacts
from agora.frameworks.service.placement import AgentSlot
from agora.frameworks.service.scheduler import ServiceScheduler
from agora.frameworks.service.servicer import ServicesServicer
from agora.frameworks.service.store import ServiceStore
from agora.v1 import operator_pb2, services_pb2, services_pb2_grpc

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
    # Converge at least this often (it also runs after every change).
    converge_interval: float = 1.0
    # How often the list of agents (for placement explanations) is refreshed.
    catalog_interval: float = 2.0
    # An instance not RUNNING this long after its launch is killed and replaced.
    launch_timeout: float = 300.0

    def validate(self) -> None:
        parse_masters(self.master)  # any --master form; MasterSpecError is a ValueError
        check_listen("the services framework", self.host, self.credentials, self.insecure)
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        for name in ("failover_timeout", "converge_interval", "catalog_interval", "launch_timeout"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")

    @property
    def state_path(self) -> Path | None:
        return None if self.state_dir is None else Path(self.state_dir) / "services.sqlite3"


class ServicesDaemon(FrameworkDaemon):
    """The Services API and the service scheduler, subscribed to the master as one framework."""

    kind = "services"
    service_names = SERVICE_NAMES
    config: ServicesConfig
    store: ServiceStore | None
    scheduler: ServiceScheduler | None

    def __init__(self, config: ServicesConfig) -> None:
        super().__init__(config)
        self.config = config  # typed as ServicesConfig
        self._operator: FollowingStub | None = None

    def _open(self, operator: FollowingStub) -> None:
        """Loads the apps."""
        self.store = ServiceStore(self.state_source)
        self._operator = operator
        self.scheduler = ServiceScheduler(
            self.store,
            role=self.config.role,
            catalog=self._catalog,
            launch_timeout=self.config.launch_timeout,
        )

    def _add_services(self, server: grpc.aio.Server) -> None:
        assert self.scheduler is not None
        servicer = ServicesServicer(self.scheduler, self.authorize)
        services_pb2_grpc.add_ServicesServicer_to_server(servicer, server)

    def _start_background(self) -> list[asyncio.Task]:
        assert self.scheduler is not None
        return [
            asyncio.create_task(
                self.scheduler.run(self.config.converge_interval, self.config.catalog_interval),
                name="services-converge",
            )
        ]

    def _summary(self) -> dict:
        assert self.scheduler is not None
        return {"apps": len(self.scheduler.apps), "instances": len(self.scheduler.instances)}

    def _metric_families(self) -> list:
        """Apps by state, their healthy and unhealthy instances, deployments in progress."""
        from prometheus_client.core import GaugeMetricFamily

        assert self.scheduler is not None
        apps = GaugeMetricFamily("agora_services_apps", "Apps by state.", labels=["state"])
        health = GaugeMetricFamily(
            "agora_services_instances",
            "Instances by health (healthy: running and passing their check).",
            labels=["app", "health"],
        )
        by_state: dict[str, int] = {}
        deploying = 0
        for app_id in sorted(self.scheduler.apps):
            status = self.scheduler.status(app_id)
            by_state[status.state] = by_state.get(status.state, 0) + 1
            deploying += len(status.deployments)
            health.add_metric([app_id, "healthy"], status.healthy)
            health.add_metric([app_id, "unhealthy"], status.unhealthy)
        for state in ("RUNNING", "DEPLOYING", "WAITING", "DELAYED", "SUSPENDED"):
            apps.add_metric([state], by_state.get(state, 0))
        deployments = GaugeMetricFamily(
            "agora_services_deployments_in_progress",
            "Deployments not finished yet.",
            value=deploying,
        )
        return [apps, health, deployments]

    def _stopping_hook(self) -> None:
        # Ended first, watch streams do not hold the server's stop for its whole grace.
        if self.scheduler is not None:
            self.scheduler.close_watchers()

    async def _catalog(self) -> list[AgentSlot]:
        assert self._operator is not None
        reply = await self._operator.ListAgents(operator_pb2.ListAgentsRequest(), timeout=5)
        slots = []
        for agent in reply.agents:
            if agent.state == "DRAINING":
                continue
            info = agent.info
            facts = AgentFacts(info.agent_id, info.hostname, attributes_from_proto(info.attributes))
            slots.append(AgentSlot(facts, Resources.from_proto(info.resources)))
        return slots
