"""Master: wires the core, the allocator, the state store and the gRPC services together."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import structlog

from agora.common.acls import AclError, load_acls
from agora.common.call_gate import CallGate, GateLimits
from agora.common.credentials import reload_certificate_said, server_ssl_context
from agora.common.failures import Recently
from agora.common.fence import Fence, FenceInterceptor
from agora.common.http import HttpServer
from agora.common.masters import MasterInfo
from agora.common.metrics import metrics_server
from agora.common.rpc import add_standard_services, bind, new_server, service_name
from agora.master import views
from agora.master.agent_link_service import AgentLinkService
from agora.master.allocator import AllocatorProtocol
from agora.master.authz import Authorizer, Gatekeeper
from agora.master.config import MasterConfig
from agora.master.core import MasterCore
from agora.master.dashboard import Dashboard
from agora.master.dashboard.view import MasterView
from agora.master.heap import HeapKeeper
from agora.master.metrics import MasterMetrics
from agora.master.operator_service import OperatorService
from agora.master.registry_store import RegistryStore, open_store
from agora.master.relay_service import AgentRelayService
from agora.master.scheduler_service import SchedulerService
from agora.v1 import (
    agent_link_pb2,
    agent_link_pb2_grpc,
    agent_relay_pb2,
    agent_relay_pb2_grpc,
    operator_pb2,
    operator_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

if TYPE_CHECKING:  # kazoo only where a set of masters runs
    from agora.master.event_store import ZkEventStore

log = structlog.get_logger(__name__)
Event = scheduler_pb2.Event

# The tick loop's step: how often the master's attention is measured (agents.tick), so a stall
# of the loop is seen to within this much.
TICK_STEP = 0.05

# Calls whose one request may be large (up to --max-request-bytes): every other unary call's
# request is bounded by small_request_bytes, checked before it is parsed.
LARGE_METHODS = frozenset(
    {
        "/agora.v1.Scheduler/Accept",
        "/agora.v1.Scheduler/Reconcile",
        "/agora.v1.Scheduler/Acknowledge",
    }
)

SERVICE_NAMES = [
    service_name(scheduler_pb2, "Scheduler"),
    service_name(agent_link_pb2, "AgentLink"),
    service_name(agent_relay_pb2, "AgentRelay"),
    service_name(operator_pb2, "Operator"),
]


def build_allocator(config: MasterConfig) -> AllocatorProtocol:
    """The allocator the config names; ValueError (from AllocatorConfig) on bad sorter names."""
    from agora.master.allocator import Allocator, AllocatorConfig

    return Allocator(
        AllocatorConfig(
            role_sorter=config.role_sorter,
            framework_sorter=config.framework_sorter,
            default_refuse_seconds=config.default_refuse_seconds,
            offer_mode=config.offer_mode,
            optimistic_fanout=(
                config.optimistic_fanout if config.offer_mode == "optimistic" else 0
            ),
        )
    )


class Master:
    """The master daemon. `allocator` may be given (benchmarks, tests); else built from config."""

    def __init__(
        self,
        config: MasterConfig,
        allocator: AllocatorProtocol | None = None,
        authorizer: Authorizer | None = None,
        *,
        store: RegistryStore | None = None,
        master_id: str = "",
        masters: Callable[[], list[MasterInfo]] | None = None,
        fence: Fence | None = None,
        epoch: int = 0,
        event_store: ZkEventStore | None = None,
    ) -> None:
        """`store`, `master_id`, `masters`, `fence`, `epoch`, `event_store`: given by
        master/leadership.py when the master leads a set on ZooKeeper (its registry there, its
        id, the election's view of the set, the check that it still leads, its election's
        sequence number and the cluster events kept there); otherwise SQLite under
        --state-dir, a fresh id, and this master alone, unfenced, its events in memory."""
        config.validate()
        self.config = config
        self.metrics = MasterMetrics()
        # Every authorization decision of the master goes through this one gate (master/authz);
        # AllowAll unless ACLs are given. AclError here: a bad --acls file at start.
        if authorizer is None and config.acls_path is not None:
            authorizer = load_acls(config.acls_path)
        self.gate = Gatekeeper(authorizer, on_denied=self._denied)
        self._denials_said = Recently()
        self.allocator = allocator if allocator is not None else build_allocator(config)
        self.core: MasterCore | None = None
        self.store: RegistryStore | None = store
        self._master_id = master_id
        self._masters = masters
        self._fence = fence
        self._event_store = event_store
        self._epoch = epoch
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._http: HttpServer | None = None
        self._metrics_http: HttpServer | None = None
        self._dashboard: Dashboard | None = None
        self._join_server: grpc.aio.Server | None = None
        self.join_port: int | None = None
        self._tasks: list[asyncio.Task] = []
        self._closed = asyncio.Event()

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("the master is not started")
        return f"{self.config.host}:{self.port}"

    @property
    def master_id(self) -> str:
        return self.core.master_id if self.core else ""

    async def start(self) -> int:
        """Recovers state, binds, starts allocation and heartbeats; returns the bound port."""
        if self.store is None:
            self.store = open_store(self.config.state_path)
        self.core = MasterCore(
            self.config,
            self.allocator,
            self.store,
            master_id=self._master_id,
            epoch=self._epoch,
            event_store=self._event_store,
        )
        if self._masters is not None:
            self.core.masters = self._masters
        self.core.counts.observe_offer_latency = self.metrics.offer_latency_seconds.observe
        self.core.offers.observe_cycle = self.metrics.allocation_seconds.observe
        self.core.preemptions.on_preempted = lambda p: self.metrics.preemptions.labels(
            p.reason
        ).inc()
        self.core.recover_state()
        fenced = (
            [FenceInterceptor(self._fence, lambda: self.address)] if self._fence is not None else []
        )
        server = new_server(
            interceptors=[*fenced, self.metrics.grpc],
            credentials=self.config.credentials,
            on_auth_failure=lambda reason, method: self.metrics.authentication_failures.labels(
                reason
            ).inc(),
            gate=self._call_gate(),
            max_receive_bytes=self.config.max_request_bytes,
        )
        scheduler = SchedulerService(self.core, self.gate, self.metrics.grpc.count)
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, server)
        agent_link = AgentLinkService(self.core, self.gate)
        agent_link_pb2_grpc.add_AgentLinkServicer_to_server(agent_link, server)
        relay = AgentRelayService(self.core, self.gate)
        agent_relay_pb2_grpc.add_AgentRelayServicer_to_server(relay, server)
        operator = OperatorService(self.core, gate=self.gate)
        operator_pb2_grpc.add_OperatorServicer_to_server(operator, server)
        join = self._join_service()
        if join is not None:  # Renew, over mutual TLS; Join itself is on the join port
            from agora.v1 import join_pb2_grpc

            join_pb2_grpc.add_JoinServicer_to_server(join, server)
        add_standard_services(server, SERVICE_NAMES)
        try:
            port = bind(server, f"{self.config.host}:{self.config.port}", self.config.credentials)
        except OSError:
            self.store.close()
            raise
        await server.start()
        self._server, self.port = server, port
        self._tasks = [
            asyncio.create_task(self.core.offers.run(), name="allocation"),
            asyncio.create_task(self._tick_loop(), name="master-tick"),
        ]
        if self.config.http_port is not None:
            await self._start_http(self.config.http_port)
        if self.config.metrics_port is not None:
            await self._start_metrics(self.config.metrics_port)
        if join is not None:
            await self._start_join(join)
        for warning in views.security_warnings(self.config):
            log.warning(warning)
        log.info(
            "master started",
            address=self.address,
            master_id=self.core.master_id,
            state=self.store.describe(),
        )
        self.core.events.publish(
            "master",
            "MASTER_LEADING",
            self.core.master_id,
            address=self.address,
            epoch=self._epoch or None,
        )
        return port

    async def _start_http(self, port: int) -> None:
        """The dashboard, on the master's own event loop, reading the Operator's views."""
        assert self.core is not None
        self._dashboard = Dashboard(
            MasterView(self.core),
            credentials=self.config.credentials,
            gate=self.gate,
            leads=self._fence.holds if self._fence is not None else None,
            clock=self.core.clock,
        )
        self._http = HttpServer(
            self.config.host, port, self._dashboard.routes(), self._ssl_context()
        )
        await self._http.start()
        await self._dashboard.start()

    def _join_service(self):
        """The Join service when machines may join (--join-ca), its CA checked; else None."""
        config, creds = self.config, self.config.credentials
        if config.join_ca_dir is None:
            return None
        from agora.common.certificates import CertificateAuthority, CertificateError
        from agora.master.join_service import JoinService

        assert self.store is not None
        if self.store.describe() == "memory":
            self.store.close()
            raise OSError(
                "joining (--join-ca) needs a registry that outlives a restart: give --state-dir "
                "(or --zk), so that a spent token stays spent"
            )
        try:
            ca = CertificateAuthority(config.join_ca_dir)
        except CertificateError as e:
            self.store.close()
            raise OSError(f"--join-ca {config.join_ca_dir}: {e}") from None
        if ca.cert_pem.strip() != (creds.ca or b"").strip():
            self.store.close()
            raise OSError(
                f"--join-ca {config.join_ca_dir} is not the CA of --tls-ca: joined machines "
                "would not be trusted by this cluster"
            )
        return JoinService(ca, self.store, config.join_cert_days)

    async def _start_join(self, service) -> None:
        """The join port: TLS with the master's certificate, no client certificate asked, and
        only the Join service (master/join_service.py)."""
        from agora.v1 import join_pb2_grpc

        config, creds = self.config, self.config.credentials
        assert creds.key is not None and creds.cert is not None
        # Strangers reach this port: small messages only (a join request is under 2 KB), and
        # a bound on the calls served at once.
        server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", 64 * 1024)],
            maximum_concurrent_rpcs=64,
        )
        join_pb2_grpc.add_JoinServicer_to_server(service, server)
        where = f"{config.host}:{config.join_port}"
        # No client certificate is asked for: a joining machine has none yet, and a joined one
        # renews here by signing its request (gRPC's Python servers either require a client
        # certificate or ask for none).
        tls = grpc.ssl_server_credentials([(creds.key, creds.cert)], require_client_auth=False)
        try:
            port = server.add_secure_port(where, tls)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"cannot listen on {where} for joins (--join-port): in use?")
        await server.start()
        self._join_server, self.join_port = server, port
        log.info("accepting joins", address=f"{config.host}:{port}", ca=str(config.join_ca_dir))

    def _call_gate(self) -> CallGate:
        """The door before any request is read (common/call_gate.py): callers no ACL rule
        names, principals past their calls or streams, requests larger than their call."""
        config = self.config
        limits = GateLimits(
            small_request_bytes=config.small_request_bytes,
            large_methods=LARGE_METHODS,
            calls_per_principal=config.max_calls_per_principal,
            streams_per_principal=config.max_streams_per_principal,
        )

        def knows(principal: str) -> bool:
            names = getattr(self.gate.authorizer, "names", None)
            return names is None or names(principal)

        def refused(principal: str, method: str, reason: str, message: str) -> None:
            self.metrics.calls_refused.labels(reason).inc()
            if self._denials_said.say((principal, method, reason)) is not None:
                log.warning("call refused at the door", principal=principal or "(anonymous)",
                            method=method, reason=reason, detail=message)  # fmt: skip

        return CallGate(limits, knows=knows if config.acls_path else None, on_refused=refused)

    async def _start_metrics(self, port: int) -> None:
        core = self.core
        assert core is not None
        self.metrics.watch(
            state=lambda: views.cluster_state(core, ""),
            offers=lambda: len(core.reg.offers),
            counts=lambda: core.counts,
            awaiting_ack=lambda: sum(
                1 for t in (*core.reg.tasks.values(), *core.reg.completed.values()) if t.final_uuid
            ),
        )
        self._metrics_http = metrics_server(
            self.config.host,
            port,
            self.metrics.registry,
            self._ssl_context(),
            # No --acls: anyone may read, as every other call; with it, read_metrics decides.
            authorizer=lambda: self.gate.authorizer if self.config.acls_path else None,
            tokens=self.config.credentials.tokens,
        )
        await self._metrics_http.start()

    def tls_handshake_refused(self, reason: str, words: str) -> None:
        """A caller turned away in the TLS handshake (common/handshakes; any thread)."""
        log.warning("TLS handshake refused", reason=reason, detail=words)
        self.metrics.authentication_failures.labels(reason).inc()

    def _denied(self, principal: str, action, obj: str, message: str) -> None:
        # Once a minute per principal, action and object: a refused agent or framework
        # retrying with backoff must not fill the log (the counter counts every one).
        unsaid = self._denials_said.say((principal, str(action), obj))
        if unsaid is not None:
            log.warning(
                "authorization denied",
                principal=principal or "(anonymous)",
                action=str(action),
                object=obj,
                **({"repeated": unsaid} if unsaid else {}),
            )
        self.metrics.denials.labels(str(action)).inc()

    def on_hangup(self) -> None:
        """SIGHUP: re-reads --acls and the certificate files (each kept when the new one is
        bad, saying why)."""
        self.reload_acls()
        reload_certificate_said(self.config.credentials, log)

    def reload_acls(self) -> bool:
        """Re-reads --acls (on SIGHUP); a bad file is logged and the ACLs in force stay."""
        if self.config.acls_path is None:
            return False
        try:
            self.gate.authorizer = load_acls(self.config.acls_path)
        except AclError as e:
            log.error("ACLs not reloaded; the previous ones stay in force", error=str(e))
            return False
        log.info("ACLs reloaded", path=str(self.config.acls_path))
        if self.core is not None:
            self.core.events.publish("acl", "ACLS_RELOADED", str(self.config.acls_path))
            self.core.events.audit("", "RELOAD_ACLS", str(self.config.acls_path), "SIGHUP", "ok")
        return True

    def _ssl_context(self):
        """HTTPS with the master's certificate when it has one: the HTTP ports follow the
        gRPC port's rule (TLS, loopback, or --insecure)."""
        credentials = self.config.credentials
        return server_ssl_context(credentials) if credentials.secure else None

    @property
    def metrics_address(self) -> str | None:
        """host:port of /metrics, when served."""
        return self._metrics_http.address if self._metrics_http is not None else None

    @property
    def http_url(self) -> str | None:
        """http(s)://host:port of the dashboard, when served."""
        return self._http.url if self._http is not None else None

    @property
    def metrics_url(self) -> str | None:
        return self._metrics_http.url if self._metrics_http is not None else None

    @property
    def http_address(self) -> str | None:
        """host:port of the dashboard, when served."""
        return self._http.address if self._http is not None else None

    async def stop(self, grace: float = 1.0) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        if self._dashboard is not None:
            await self._dashboard.stop()
        if self._http is not None:
            await self._http.stop()
        if self._metrics_http is not None:
            await self._metrics_http.stop()
        if self._join_server is not None:
            await self._join_server.stop(grace)
        for task in self._tasks:
            task.cancel()
        HeapKeeper.stop()
        # gather, not `suppress(CancelledError)`: a cancellation of stop() itself must still
        # propagate.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # End every stream so their handlers return before the server stops.
        assert self.core is not None
        self.core.stopping = True
        for agent in self.core.reg.agents.values():
            if agent.session is not None:
                agent.session.close()
        for framework in self.core.reg.frameworks.values():
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
            if framework.session is not None:
                framework.session.close()
        await server.stop(grace)
        if self.store is not None:
            self.store.close()
        log.info("master stopped", address=self.address)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # --- background work -------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        """Heartbeats to frameworks; the master's attention (agents.tick); removes silent
        agents; expires offers and holds.

        Agents get no heartbeat messages: their channel's gRPC keepalive (common/rpc.py) tells
        them the master is there, answered by gRPC's core without a line of Python, so an
        agent keeps its stream to a master that is busy but alive. Writing a heartbeat to each
        of 10,000 agents was 60% of an idle master's CPU. The master still judges agents on
        their own heartbeats, as evidence that they are alive."""
        assert self.core is not None
        core, config = self.core, self.config
        period = min(config.heartbeat_interval_seconds, config.agent_timeout_seconds / 4)
        slices = max(10, round(config.heartbeat_interval_seconds / TICK_STEP))
        step = config.heartbeat_interval_seconds / slices
        clock = core.clock
        next_check = clock.now()
        turn = 0
        heap = HeapKeeper(clock.now())
        while True:
            try:
                heap.tick(clock.now(), busy=core.offers.cycling)
                if turn == 0:
                    event = Event(heartbeat=Event.Heartbeat())
                    for framework in core.reg.frameworks.values():
                        framework.send(event)
                turn = (turn + 1) % slices
                check = clock.now() >= next_check
                if check:
                    next_check = clock.now() + period
                core.tick(step, check)
            except Exception:
                log.exception("master tick failed")
            await asyncio.sleep(step)
