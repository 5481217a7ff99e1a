"""A real cluster in the test's event loop for the service framework's tests: a Master, agent
daemons running real processes, and a ServicesDaemon, all on loopback; plus a Services client."""

from __future__ import annotations

import contextlib
import random
import socket
import urllib.request
from pathlib import Path

from harness import eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.frameworks.service import ServicesConfig, ServicesDaemon
from agora.master import Master, MasterConfig
from agora.v1 import services_pb2, services_pb2_grpc


def _ephemeral_low() -> int:
    """The first port the kernel hands out for port 0 and outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_range(count: int) -> tuple[int, int]:
    """A run of ports that were free a moment ago (bound one by one, then released), below the
    kernel's ephemeral range: taken from it, a port of the range could be handed out again at
    once to a server started on port 0 (another agent's) or to an outgoing connection, and the
    task offered it would find it taken."""
    top = _ephemeral_low() - count
    for _ in range(200):
        first = random.randrange(10000, top)
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first, first + count - 1
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free port range")


class ServiceCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.master: Master | None = None
        self.agents: list[AgentDaemon] = []
        self.services: ServicesDaemon | None = None
        self._channel = None
        self.stub: services_pb2_grpc.ServicesStub | None = None

    async def start_master(self, **overrides) -> Master:
        """The master; `overrides` are more MasterConfig fields (e.g. preemption timeouts)."""
        self.master = Master(
            MasterConfig(
                host="127.0.0.1",
                port=0,
                state_dir=self.root / "master",
                heartbeat_interval_seconds=0.2,
                agent_timeout_seconds=5.0,
                allocation_interval_seconds=0.5,
                **overrides,
            )
        )
        await self.master.start()
        return self.master

    async def start_agent(
        self,
        index: int,
        cpus: float = 2,
        mem: float = 2048,
        attributes: dict[str, str] | None = None,
    ) -> AgentDaemon:
        assert self.master is not None
        first, last = free_port_range(10)
        agent = AgentDaemon(
            AgentConfig(
                master=self.master.address,
                port=0,
                work_dir=self.root / f"agent-{index}",
                hostname=f"host-{index}",
                resources=Resources.parse(
                    f"cpus:{cpus};mem:{mem};disk:1024;ports:[{first}-{last}]"
                ),
                attributes=attributes if attributes is not None else {"rack": f"r{index % 2}"},
                reconnect_backoff_initial_seconds=0.05,
                reconnect_backoff_max_seconds=0.5,
                update_backoff_initial_seconds=0.2,
                update_backoff_max_seconds=1.0,
                default_kill_grace_seconds=1.0,
            )
        )
        await agent.start()
        self.agents.append(agent)
        await eventually_async(lambda: agent.agent_id, timeout=20, message="agent registered")
        return agent

    def services_config(self, **overrides) -> ServicesConfig:
        assert self.master is not None
        fields = {
            "master": self.master.address,
            "port": 0,
            "state_dir": self.root / "services",
            "converge_interval": 0.2,
            "catalog_interval": 0.3,
        }
        return ServicesConfig(**{**fields, **overrides})

    async def start_services(self, **overrides) -> ServicesDaemon:
        """The services daemon the cluster's client talks to; `overrides`: ServicesConfig
        fields (e.g. its role)."""
        self.services = ServicesDaemon(self.services_config(**overrides))
        await self.services.start()
        if self._channel is not None:
            await self._channel.close()
        self._channel = insecure_channel(self.services.address)
        self.stub = services_pb2_grpc.ServicesStub(self._channel)
        await eventually_async(
            lambda: self.services.driver is not None and self.services.driver.connected,
            timeout=20,
            message="services subscribed",
        )
        return self.services

    async def stop_services(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        if self.services is not None:
            await self.services.stop()
            self.services = None

    async def stop(self) -> None:
        await self.stop_services()
        for agent in self.agents:
            # Let launches in flight finish first: stopping an agent mid-launch cancels the
            # launcher's wait on its wrapper and leaves a pipe open (a ResourceWarning).
            with contextlib.suppress(Exception, AssertionError):
                await eventually_async(
                    lambda agent=agent: all(
                        r.wrapper is not None or r.ended.is_set() for r in agent.tasks.active_runs()
                    ),
                    timeout=10,
                    message="launches in flight",
                )
            with contextlib.suppress(Exception):
                await agent.stop(kill_tasks=True)
        if self.master is not None:
            await self.master.stop(0)

    # --- the API ------------------------------------------------------------------------------

    async def put(self, app: services_pb2.App, create_only: bool = False):
        assert self.stub is not None
        return await self.stub.PutApp(services_pb2.PutAppRequest(app=app, create_only=create_only))

    async def get(self, app_id: str) -> services_pb2.AppStatus:
        assert self.stub is not None
        return await self.stub.GetApp(services_pb2.GetAppRequest(id=app_id))

    async def endpoints(self, app_id: str) -> list[str]:
        assert self.stub is not None
        reply = await self.stub.GetEndpoints(services_pb2.GetEndpointsRequest(app_id=app_id))
        return [
            f"{e.host}:{e.ports[0]}" if e.ports else f"{e.host}/{e.task_id}"
            for e in reply.endpoints
        ]

    async def healthy_endpoints(self, app_id: str, count: int, timeout: float = 60) -> list[str]:
        async def ready():
            found = await self.endpoints(app_id)
            return found if len(found) == count else None

        return await eventually_async(
            ready, timeout=timeout, message=f"{count} healthy endpoints of {app_id}"
        )


def http_ok(endpoint: str) -> bool:
    with urllib.request.urlopen(f"http://{endpoint}/", timeout=5) as reply:
        return reply.status == 200


def web_app(app_id: str = "web", instances: int = 3, **overrides) -> services_pb2.App:
    """`python3 -m http.server $PORT0` with an HTTP health check on it."""
    from agora.v1 import common_pb2

    app = services_pb2.App(
        id=app_id,
        cmd="exec python3 -m http.server $PORT0 --bind 127.0.0.1",
        instances=instances,
        cpus=0.1,
        mem=64,
        ports=1,
        health_check=common_pb2.HealthCheck(
            http=common_pb2.HttpCheck(port_index=0, path="/"),
            grace_period_seconds=30,
            interval_seconds=0.2,
            timeout_seconds=2,
            max_consecutive_failures=2,
        ),
        backoff=services_pb2.BackoffPolicy(backoff_seconds=0.2),
        kill_grace_period_seconds=1,
    )
    for key, value in overrides.items():
        field = getattr(app, key)
        if hasattr(field, "CopyFrom"):
            field.CopyFrom(value)
        elif isinstance(value, dict):
            field.clear()
            field.update(value)
        elif isinstance(value, list):
            del field[:]
            field.extend(value)
        else:
            setattr(app, key, value)
    return app
