"""FrameworkDaemon: a framework's own gRPC API served next to its driver, as one daemon."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, Any, Protocol

import grpc
import structlog

from agora.common.acls import AclError, load_acls
from agora.common.authz import Action, AllowAll, Authorizer, Decision
from agora.common.backoff import Backoff
from agora.common.credentials import (
    INSECURE,
    Credentials,
    reload_certificate_said,
    server_ssl_context,
)
from agora.common.failures import RepeatFilter
from agora.common.fence import Fence, FenceInterceptor
from agora.common.leader import FollowingStub, LeaderTracker
from agora.common.rpc import add_standard_services, bind, new_server
from agora.frameworks.sdk.driver import Driver, SubscriptionEnded, framework_info
from agora.frameworks.sdk.framework import Framework
from agora.frameworks.sdk.state_store import StateStore
from agora.frameworks.sdk.transport import GrpcSchedulerTransport
from agora.v1 import operator_pb2_grpc

if TYPE_CHECKING:  # the HTTP stack is loaded only by a daemon that serves /metrics
    from agora.common.http import HttpServer
    from agora.frameworks.sdk.replication import ReplicatedDatabase

log = structlog.get_logger(__name__)


class DaemonConfig(Protocol):
    """What FrameworkDaemon reads from its subclass's config dataclass."""

    master: str  # host:port of the master
    host: str  # where the API listens
    port: int  # 0 picks a free port
    advertise_host: str | None  # published to clients instead of host
    name: str  # the framework's name at the master (clients look it up by it)
    role: str
    failover_timeout: float  # how long the master keeps our tasks while we are away
    # Optional: `credentials` (agora.common.credentials.Credentials), mutual TLS to the master
    # and on the API; a config without it runs in plaintext. `acls_path`: an ACL file
    # (common/acls.py) saying who may use the API (submit_jobs, manage_apps); without it
    # anyone may. `user`: the Unix user tasks run as unless they name one (default: ours).

    @property
    def state_path(self) -> Any: ...  # the SQLite file, or None to keep state in memory

    def validate(self) -> None: ...


class FrameworkDaemon:
    """Serves a framework's API and keeps its scheduler subscribed to the master.

    The API's address is published to the master as FrameworkInfo.service_address, so clients
    need only the master's address (`find_framework_api`). If the master removes the
    framework, the daemon subscribes afresh under a new id; if another scheduler takes the
    framework over, it stops scheduling. `stop()` only disconnects: the master keeps the tasks
    for failover_timeout, and a daemon restarted on the same state takes them back.

    A subclass sets `kind` and `service_names` and builds its parts in `_open` and
    `_add_services`; the other hooks are optional. Its scheduler saves the id it is given in
    `on_subscribed` (`store.set_framework_id`): the daemon subscribes with the stored id.
    """

    kind = "framework"  # names the daemon in logs and task names: "batch", "services"
    capabilities: tuple[str, ...] = ()  # FrameworkInfo.capabilities, e.g. GPU_RESOURCES
    service_names: list[str] = []  # its gRPC services, announced by health and reflection

    def __init__(self, config: DaemonConfig) -> None:
        config.validate()
        self.config = config
        self.store: StateStore | None = None
        self.scheduler: Framework | None = None
        # Set by a highly available set's leadership (leadership.py) before `start`: the state
        # replicated through ZooKeeper, and the fence every API call passes.
        self.replica: ReplicatedDatabase | None = None
        self.fence: Fence | None = None
        # FrameworkInfo.labels; one of a set publishes SET_LABEL (its zk:// URL), so that
        # clients finding the API through the master wait for a failover instead of failing.
        self.labels: dict[str, str] = {}
        self.driver: Driver | None = None
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._channel: FollowingStub | None = None  # Operator calls to the leading master
        self._driver_task: asyncio.Task | None = None
        self._background: list[asyncio.Task] = []
        self._stopping = False
        self._closed = asyncio.Event()
        # Prometheus: gRPC calls of the API, and what `_metric_families` reports at scrape time.
        # (Imported here: a framework that is not a daemon need not load the HTTP stack.)
        from prometheus_client import CollectorRegistry, Counter

        from agora.common.metrics import GrpcMetrics

        self.metrics_registry = CollectorRegistry()
        self.authentication_failures = Counter(
            "agora_framework_authentication_failures",
            "Callers refused for their credentials (a refused TLS handshake, a missing or "
            "unknown bearer token), by reason.",
            ["reason"],
            registry=self.metrics_registry,
        )
        self._grpc_metrics = GrpcMetrics(self.metrics_registry)
        self.metrics_registry.register(_Families(self._metric_families))
        self._metrics_http: HttpServer | None = None  # when serving /metrics
        # Who may use the API (--acls); AllowAll without. AclError on a bad file at start.
        self.authorizer: Authorizer = AllowAll()
        acls = getattr(config, "acls_path", None)
        if acls is not None:
            self.authorizer = load_acls(acls)

    def authorize(self, principal: str, action: Action, obj: str) -> Decision:
        """The decision of the current ACLs (re-read by `reload_acls`)."""
        return self.authorizer.authorize(principal, action, obj)

    def on_hangup(self) -> None:
        """SIGHUP: re-reads --acls and the certificate files (each kept when the new one is
        bad, saying why)."""
        self.reload_acls()
        reload_certificate_said(self.credentials, log)

    def reload_acls(self) -> bool:
        """Re-reads --acls (on SIGHUP); a bad file keeps the old rules and says why."""
        path = getattr(self.config, "acls_path", None)
        if path is None:
            return False
        try:
            self.authorizer = load_acls(path)
        except AclError as e:
            log.error("ACL file not reloaded; the old rules stay", error=str(e))
            return False
        log.info("ACLs reloaded", path=str(path))
        return True

    def tls_handshake_refused(self, reason: str, words: str) -> None:
        """A caller turned away in the TLS handshake (common/handshakes; any thread)."""
        log.warning("TLS handshake refused", reason=reason, detail=words)
        self.authentication_failures.labels(reason).inc()

    # what a framework daemon supplies ----------------------------------------------------

    def _open(self, operator: FollowingStub) -> None:
        """Loads the state and builds the scheduler: sets self.store and self.scheduler.
        `operator` makes Operator calls to the leading master (closed on stop)."""
        raise NotImplementedError

    def _add_services(self, server: grpc.aio.Server) -> None:
        """Adds the framework's servicers to the server."""
        raise NotImplementedError

    def _start_background(self) -> list[asyncio.Task]:
        """Work beside the driver, cancelled on stop."""
        return []

    def _framework_removed(self, message: str) -> None:
        """The master removed the framework (and killed its tasks); its id is cleared after."""

    def _stopping_hook(self) -> None:
        """Before the server stops: end what would keep it waiting (watch streams)."""

    def _stopped_hook(self) -> None:
        """After the server, the driver and the background work ended; before the store
        closes."""

    def _summary(self) -> dict[str, Any]:
        """Extra fields for the "started" log line."""
        return {}

    # the daemon --------------------------------------------------------------------------

    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError(f"the {self.kind} daemon is not started")
        return f"{self.config.host}:{self.port}"

    @property
    def state_source(self) -> Any:
        """What the store opens: the replicated state when one of a set, else the SQLite file
        (None: memory)."""
        return self.replica if self.replica is not None else self.config.state_path

    @property
    def credentials(self) -> Credentials:
        return getattr(self.config, "credentials", INSECURE)

    @property
    def service_address(self) -> str:
        """What clients dial, as published to the master."""
        host = self.config.advertise_host or self.config.host
        if host in ("", "0.0.0.0", "::", "[::]"):
            host = socket.gethostname()
        return f"{host}:{self.port}"

    async def start(self) -> int:
        """Loads the state, binds the API, and subscribes to the master."""
        config = self.config
        # Operator calls go to whichever master leads (a standby's redirect is followed).
        tracker = LeaderTracker(config.master)
        await tracker.start()
        self._channel = FollowingStub(operator_pb2_grpc.OperatorStub, tracker, self.credentials)
        self._open(self._channel)
        assert self.store is not None and self.scheduler is not None
        interceptors: list = [self._grpc_metrics]
        if self.fence is not None:
            interceptors.append(FenceInterceptor(self.fence, lambda: self.service_address))
        server = new_server(
            interceptors=interceptors,
            credentials=self.credentials,
            on_auth_failure=lambda reason, method: self.authentication_failures.labels(
                reason
            ).inc(),
        )
        self._add_services(server)
        add_standard_services(server, self.service_names)
        try:
            port = bind(server, f"{config.host}:{config.port}", self.credentials)
        except OSError:
            self.store.close()
            await self._channel.close()
            raise
        await server.start()
        self._server, self.port = server, port
        self._driver_task = asyncio.create_task(
            self._run_framework(), name=f"{self.kind}-framework"
        )
        self._background = self._start_background()
        metrics_port = getattr(config, "metrics_port", None)
        if metrics_port is not None:
            from agora.common.metrics import metrics_server

            secure = self.credentials.secure
            self._metrics_http = metrics_server(
                config.host,
                metrics_port,
                self.metrics_registry,
                server_ssl_context(self.credentials) if secure else None,
                # --acls: read_metrics decides; without, anyone may read.
                authorizer=lambda: (
                    self.authorizer if getattr(config, "acls_path", None) is not None else None
                ),
                tokens=self.credentials.tokens,
            )
            await self._metrics_http.start()
        log.info(
            f"{self.kind} daemon started",
            address=self.address,
            framework_id=self.store.framework_id() or None,
            state=str(self.store.path or "memory"),
            **self._summary(),
        )
        return port

    async def _run_framework(self) -> None:
        """Runs the driver; if the master removed the framework, subscribes afresh (the
        daemon's work stays; what the lost tasks did is for `_framework_removed`)."""
        assert self.scheduler is not None and self.store is not None
        backoff = Backoff()
        said = RepeatFilter()  # a refusal is said once, not by every new driver
        while not self._stopping:
            info = framework_info(
                self.config.name,
                user=getattr(self.config, "user", None),
                role=self.config.role,
                failover_timeout=self.config.failover_timeout,
                service_address=self.service_address,
                framework_id=self.store.framework_id(),
                capabilities=self.capabilities,
                labels=self.labels,
            )
            transport = GrpcSchedulerTransport(self.config.master, credentials=self.credentials)
            self.driver = Driver(self.scheduler, transport, info, failures=said)
            try:
                await self.driver.run()
                return
            except SubscriptionEnded as e:
                if self._stopping:
                    return
                if e.refused:
                    # Turned away (the ACLs, the credentials): nothing was removed, and an ACL
                    # file re-read may let us in; the driver said why. Try again with backoff.
                    await asyncio.sleep(backoff.next_delay())
                    continue
                if "failed over" in e.message:
                    log.error(
                        f"another {self.kind} scheduler took over this framework; this daemon "
                        "no longer schedules",
                        message=e.message,
                    )
                    return
                log.warning("the master ended the framework; subscribing afresh", message=e.message)
                self._framework_removed(e.message)
                self.store.set_framework_id("")
                await asyncio.sleep(backoff.next_delay())
            except Exception:
                log.exception(f"{self.kind} framework driver failed; restarting it")
                await asyncio.sleep(backoff.next_delay())

    async def stop(self, grace: float = 1.0) -> None:
        """Stops serving and disconnects; the master keeps our tasks running for
        failover_timeout, so a restarted daemon takes them back."""
        if self._server is None:
            return
        self._stopping = True
        server, self._server = self._server, None
        if self._metrics_http is not None:
            await self._metrics_http.stop()
        self._stopping_hook()
        await server.stop(grace)
        if self.driver is not None:
            self.driver.stop()
        for task in self._background:
            task.cancel()
        if self._driver_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._driver_task, 10)
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._stopped_hook()
        if self._channel is not None:
            await self._channel.close()
        if self.store is not None:
            self.store.close()
        log.info(f"{self.kind} daemon stopped", address=self.address)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    @property
    def metrics_url(self) -> str | None:
        """http(s)://host:port of /metrics, when served."""
        return self._metrics_http.url if self._metrics_http is not None else None

    def _metric_families(self) -> list:
        """The framework's own metrics (prometheus_client metric families), read at scrape
        time on the event loop; none by default."""
        return []


class _Families:
    """A prometheus_client collector (duck-typed: `collect` is all a registry needs)."""

    def __init__(self, families) -> None:
        self._families = families

    def collect(self):
        yield from self._families()
