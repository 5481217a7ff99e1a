"""The agent daemon: serves the `Agent` service and keeps its link to the master."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import socket
from pathlib import Path

import grpc
import structlog

from agora.agent import native_wrapper, task_namespaces
from agora.agent.checkpoint import WorkDir
from agora.agent.config import AgentConfig
from agora.agent.containers import Containers
from agora.agent.file_access import SandboxAccess
from agora.agent.files_service import AgentFilesService
from agora.agent.gpus import GpuSet, detect_gpus
from agora.agent.health_checks import HealthCheckManager
from agora.agent.images import ImageStore
from agora.agent.isolation import Isolator, owner_name
from agora.agent.link import MasterLink
from agora.agent.metrics import AgentMetrics
from agora.agent.resources_detect import detect_resources
from agora.agent.sandbox_watch import (
    SandboxWatch,
)
from agora.agent.status_updates import StatusUpdateManager
from agora.agent.task_env import base_environment
from agora.agent.task_manager import TaskManager, is_terminal
from agora.agent.usage import usage_report
from agora.common import Resources, attributes_to_proto
from agora.common.acls import AclError, load_acls
from agora.common.addresses import source_address_towards
from agora.common.credentials import (
    check_listen,
    is_loopback,
    reload_certificate_said,
    server_ssl_context,
)
from agora.common.http import HttpServer
from agora.common.masters import MasterSet, parse_masters
from agora.common.metrics import metrics_server
from agora.common.rpc import add_standard_services, bind, new_server, service_name
from agora.v1 import agent_link_pb2, agent_pb2, agent_pb2_grpc, common_pb2

log = structlog.get_logger(__name__)

VERSION = "0.1.0"


class AgentDaemon:
    def __init__(self, config: AgentConfig) -> None:
        config.validate()
        masters = parse_masters(config.master)  # fail early on a malformed --master
        if config.host is None:
            host = _host_towards(masters)
            config = dataclasses.replace(config, host=host)
            try:
                check_listen("the agent", host, config.credentials, config.insecure)
            except ValueError as e:
                raise ValueError(
                    f"{e}; {host} is the address this machine reaches the master from "
                    "(--host 127.0.0.1 serves task logs to this machine only)"
                ) from None
        else:
            host = config.host
        check_listen("the agent", host, config.credentials, config.insecure)
        self.host = host  # where the Agent service listens
        self.config = config
        self.work = WorkDir(Path(config.work_dir))
        self.resources = (
            config.resources if config.resources is not None else detect_resources(self.work.root)
        )
        # NVIDIA GPUs (listed with --gpus, or found): offered as gpus:N, one task per device.
        devices = detect_gpus(config.gpus)
        offered = self.resources.scalar("gpus")
        if devices and not offered:
            self.resources = self.resources + Resources.parse(f"gpus:{len(devices)}")
        elif offered and devices and offered != len(devices):
            raise ValueError(
                f"resources say gpus:{offered:g} but this agent has {len(devices)} GPU(s) "
                "(list the devices with --gpus 0,1,...)"
            )
        elif offered and not devices:
            # Declared, none found (an emulated cluster, a driver not loaded): the tasks still
            # each get their own indices, and no device nodes.
            devices = [str(i) for i in range(int(offered))]
            log.warning(
                "resources name GPUs but none was found; tasks get device indices only",
                gpus=int(offered),
            )
        self.gpus = GpuSet(devices)
        self.namespaces_decision = task_namespaces.decide(
            config.task_namespaces,
            root=os.geteuid() == 0,
            sys_admin=task_namespaces.has_capability(task_namespaces.CAP_SYS_ADMIN),
            kernel_kinds=os.listdir("/proc/self/ns"),
            c_wrapper=lambda: native_wrapper.wrapper_path() is not None,
            trial=lambda: task_namespaces.trial(
                native_wrapper.wrapper_path() or "", self.work.sandboxes, self.work.meta / "trial"
            ),
        )
        self.namespaces = self.namespaces_decision.on
        if config.task_namespaces is None and not self.namespaces:
            log.warning(
                "tasks run without namespaces of their own",
                why=self.namespaces_decision.why_not,
            )
        self.agent_id = self.work.load_agent_id()
        self.master_id = ""
        self.updates = StatusUpdateManager(
            self.work.updates_log,
            self._send_update,
            initial_backoff=config.update_backoff_initial_seconds,
            max_backoff=config.update_backoff_max_seconds,
        )
        base_env = base_environment(config.task_env)
        self.health = HealthCheckManager(
            self.updates.update, lambda: self.agent_id, base_env=base_env
        )
        self.isolator = Isolator(enabled=config.cgroups, owner=owner_name(self.work.root))
        self.metrics = AgentMetrics()
        self.access = SandboxAccess(
            load_acls(config.acls_path) if config.acls_path is not None else None,
            on_denied=lambda action: self.metrics.denials.labels(action).inc(),
        )
        # Tasks from images: those imported into the work dir, run by runc (agent/containers),
        # each under the static C wrapper as its init (looked for once, at the first).
        self.containers = Containers(
            ImageStore(self.work.root / "images"),
            runtime=config.container_runtime,
            init=functools.cache(native_wrapper.static_wrapper),
        )
        self.tasks = TaskManager(
            self.work,
            self._emit,
            lambda: self.agent_id,
            default_kill_grace=config.default_kill_grace_seconds,
            isolator=self.isolator,
            cpu_hard_limit=config.cpu_hard_limit,
            pids_max=config.task_pids_max or None,
            containers=self.containers,
            gpus=self.gpus,
            namespaces=self.namespaces,
            metrics=self.metrics,
            completed_history=config.max_completed_tasks,
            base_env=base_env,
        )
        self.link = MasterLink(
            config.master,
            self,
            backoff_initial=config.reconnect_backoff_initial_seconds,
            backoff_max=config.reconnect_backoff_max_seconds,
            default_heartbeat=config.heartbeat_interval_seconds,
            credentials=config.credentials,
        )
        self._server: grpc.aio.Server | None = None
        self._port = 0
        self._metrics_server: HttpServer | None = None
        self._usage: agent_pb2.GetUsageResponse | None = None
        self._usage_task: asyncio.Task | None = None
        self.sandbox_watch = SandboxWatch(
            self.tasks,
            config.sandbox_watch_interval_seconds,
            config.max_log_bytes,
            config.enforce_disk,
            work_dir=self.work.root,
            gc_delay=config.gc_delay_seconds,
            gc_headroom=config.gc_disk_headroom,
        )
        self._watch_task: asyncio.Task | None = None
        self._link_task: asyncio.Task | None = None
        self._closed = asyncio.Event()
        self._log = log.bind(work_dir=str(self.work.root))

    # lifecycle --------------------------------------------------------------------------

    async def start(self) -> int:
        self.work.lock()
        try:
            self._server = new_server(
                credentials=self.config.credentials,
                on_auth_failure=lambda reason, method: self.metrics.authentication_failures.labels(
                    reason
                ).inc(),
            )
            files = AgentFilesService(self.tasks, self.updates.pending, self.access)
            agent_pb2_grpc.add_AgentServicer_to_server(files, self._server)
            add_standard_services(self._server, [service_name(agent_pb2, "Agent")])
            self._port = bind(
                self._server, f"{self.host}:{self.config.port}", self.config.credentials
            )
        except BaseException:
            self._server = None
            self.work.unlock()
            raise
        pending = self.updates.recover()
        self.tasks.recover(self.updates.pending)
        self._drop_updates_of_unknown_runs(pending)
        for run in self.tasks.active_runs():  # re-attached tasks are checked again
            if run.state == common_pb2.TASK_RUNNING:
                self.health.start_run(run, self.agent_id)
        await self._server.start()
        await self.tasks.start_launcher()
        self.updates.start()
        self._link_task = asyncio.create_task(self.link.run(), name="master-link")
        self._watch_task = asyncio.create_task(self.sandbox_watch.run(), name="sandbox-watch")
        if self.config.metrics_port is not None:
            await self._start_metrics(self.config.metrics_port)
        self._log.info(
            "agent started",
            address=self.address,
            master=self.config.master,
            agent_id=self.agent_id or "(new)",
            resources=str(self.resources),
            recovered_tasks=len(self.tasks.active_runs()),
            isolation=self.isolator.kind,
            pids_limit=(self.config.task_pids_max or "none")
            if self.isolator.pids
            else "unavailable",
            images=self.containers.describe(),
            gpus=",".join(self.gpus.devices) or None,
            namespaces="on" if self.namespaces else f"off ({self.namespaces_decision.why_not})",
        )
        return self._port

    async def _start_metrics(self, port: int) -> None:
        self.metrics.watch(
            registered=lambda: self.link.registered,
            task_states=lambda: [run.state for run in self.tasks.active_runs()],
            pending_updates=self.updates.pending_count,
            usage=lambda: self._usage,
        )
        credentials = self.config.credentials
        self._metrics_server = metrics_server(
            self.host,
            port,
            self.metrics.registry,
            server_ssl_context(credentials) if credentials.secure else None,
            authorizer=lambda: self.access.acls,  # --acls: read_metrics decides
            tokens=credentials.tokens,
        )
        await self._metrics_server.start()
        self._usage_task = asyncio.create_task(self._sample_usage(), name="usage-sampler")

    @property
    def metrics_url(self) -> str | None:
        """http(s)://host:port of /metrics, when served."""
        return self._metrics_server.url if self._metrics_server is not None else None

    @property
    def metrics_address(self) -> str | None:
        """host:port of /metrics, when served."""
        return self._metrics_server.address if self._metrics_server is not None else None

    async def _sample_usage(self) -> None:
        while True:
            running = [
                run
                for run in self.tasks.active_runs()
                if run.wrapper is not None and not is_terminal(run.state)
            ]
            # Off the loop: usage reads /proc or cgroups and walks sandboxes.
            self._usage = await asyncio.to_thread(usage_report, running)
            await asyncio.sleep(self.config.usage_interval_seconds)

    def _drop_updates_of_unknown_runs(self, pending) -> None:
        """Forgets non-terminal updates of tasks with no run record.

        Only a machine crash makes them: the record (not fsync'd) was lost, the update (fsync'd)
        was not. No run means no terminal update would ever follow; the master reports such a
        task LOST when this agent re-registers without it.
        """
        active = {run.key for run in self.tasks.active_runs()}
        for framework_id, status in pending:
            if is_terminal(status.state) or (framework_id, status.task_id) in active:
                continue
            self._log.warning(
                "dropping the update of a task with no run record (lost in a crash)",
                framework_id=framework_id,
                task_id=status.task_id,
                state=common_pb2.TaskState.Name(status.state),
            )
            self.updates.ack(framework_id, status.task_id, status.uuid)

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        """host:port where this agent's `Agent` service listens."""
        return f"{self.host}:{self._port}"

    @property
    def advertised_address(self) -> str:
        """host:port the master hands out to others (logs and sandbox browsing)."""
        host = self.config.advertise_ip or self.host
        if host in ("0.0.0.0", "::", ""):
            # Listening everywhere: the address the master (and, likely, its clients) reach;
            # with a master on this machine, the one that routes outwards.
            found = source_address_towards(self.link.master)
            host = found if found and not is_loopback(found) else _primary_ip()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self._port}"

    async def stop(self, grace: float = 1.0, kill_tasks: bool = True) -> None:
        """Stops serving and talking to the master.

        With `kill_tasks` (the default, for an agent embedded in a process such as
        `agora local` or a test) its tasks are killed first, their updates checkpointed.
        Without it they keep running for the next agent on this work dir to re-attach to, as
        `agora agent` does on SIGTERM (like Mesos' agent recovery). A second stop does nothing.
        """
        if self._closed.is_set():
            if kill_tasks:
                self._log.warning("already stopped, leaving its tasks running: none killed")
            return
        if kill_tasks:
            await self.tasks.kill_all()
            # Give the master a moment to hear (and acknowledge) how the tasks ended; what it
            # does not is checkpointed and resent by the next agent on this work dir.
            if self.link.registered:
                await self.updates.wait_acknowledged(timeout=grace)
        if self._link_task is not None:
            await self.link.stop(self._link_task)
            self._link_task = None
        for background in (self._watch_task,):
            if background is not None:
                background.cancel()
                await asyncio.gather(background, return_exceptions=True)
        self._watch_task = None
        if self._usage_task is not None:
            self._usage_task.cancel()
            await asyncio.gather(self._usage_task, return_exceptions=True)
            self._usage_task = None
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        await self.tasks.stop()
        self.isolator.close()
        await self.health.stop_all()
        await self.updates.stop()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        self.work.unlock()
        self._closed.set()
        self._log.info("agent stopped")

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def isolation(self) -> list[str]:
        """What tasks get here, and what they cannot (AgentInfo.isolation)."""
        out = [self.isolator.kind if self.isolator.enabled else "no-cgroups"]
        out.append("pids" if self.isolator.pids and self.config.task_pids_max else "no-pids")
        runtime = self.containers.runtime
        out.append(f"images:{os.path.basename(runtime)}" if runtime else "no-images")
        if self.gpus.devices:
            out.append(f"gpus:{len(self.gpus.devices)}")
        out.append("namespaces" if self.namespaces else "no-namespaces")
        out.append("clean-env")
        return out

    # the link's callbacks ---------------------------------------------------------------

    def build_register(self) -> agent_link_pb2.AgentMessage.Register:
        info = common_pb2.AgentInfo(
            agent_id=self.agent_id,
            hostname=self.config.hostname or socket.gethostname(),
            address=self.advertised_address,
            resources=self.resources.to_proto(),
            attributes=attributes_to_proto(self.config.attributes),
            isolation=self.isolation(),
        )
        return agent_link_pb2.AgentMessage.Register(
            info=info, tasks=self.tasks.running_tasks(), version=VERSION
        )

    def tls_handshake_refused(self, reason: str, words: str) -> None:
        """A caller turned away in the TLS handshake (common/handshakes; any thread)."""
        self._log.warning("TLS handshake refused", reason=reason, detail=words)
        self.metrics.authentication_failures.labels(reason).inc()

    def on_hangup(self) -> None:
        """SIGHUP: re-reads --acls and the certificate files (each kept when the new one is
        bad, saying why)."""
        self.reload_acls()
        reload_certificate_said(self.config.credentials, self._log)

    def reload_acls(self) -> bool:
        """Re-reads --acls (on SIGHUP); a bad file is logged and the ACLs in force stay."""
        if self.config.acls_path is None:
            return False
        try:
            self.access.acls = load_acls(self.config.acls_path)
        except AclError as e:
            self._log.error("ACLs not reloaded; the previous ones stay in force", error=str(e))
            return False
        self._log.info("ACLs reloaded", path=str(self.config.acls_path))
        return True

    def on_registered(self, msg) -> None:
        if msg.agent_id != self.agent_id:
            if self.agent_id:
                self._log.warning(
                    "the master gave this agent a new id", old=self.agent_id, new=msg.agent_id
                )
            self.agent_id = msg.agent_id
            self.work.save_agent_id(self.agent_id)
        self.master_id = msg.master_id
        self.access.master_principal = msg.master_principal
        self._log.info(
            "registered with the master",
            agent_id=self.agent_id,
            master_id=msg.master_id,
            heartbeat=msg.heartbeat_interval_seconds,
        )
        self.updates.resend_all_now()

    def on_run_task(self, msg) -> None:
        self.tasks.run_task(
            msg.framework_id,
            msg.task,
            user=msg.task.command.user or msg.framework.user,
            framework_principal=msg.framework_principal,
            framework_name=msg.framework.name,
        )

    def on_kill_task(self, msg) -> None:
        self.tasks.kill_task(
            msg.framework_id,
            msg.task_id,
            msg.grace_period_seconds,
            why=[msg.reason, msg.message] if msg.reason else None,
        )

    def on_status_update_ack(self, msg) -> None:
        status = self.updates.ack(msg.framework_id, msg.task_id, msg.uuid)
        if status is not None and is_terminal(status.state):
            self.tasks.complete(msg.framework_id, msg.task_id)

    def on_shutdown_framework(self, msg) -> None:
        self._log.info("shutting down framework's tasks", framework_id=msg.framework_id)
        self.tasks.shutdown_framework(msg.framework_id)

    async def on_shutdown(self, msg) -> None:
        self._log.warning(
            "the master removed this agent: killing its tasks and registering afresh",
            reason=msg.reason,
            agent_id=self.agent_id,
        )
        await self.tasks.kill_all(forget=True)
        self.updates.drop_all()
        self.agent_id = ""
        self.work.save_agent_id("")

    # status updates ---------------------------------------------------------------------

    def _emit(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        """Every task update passes here: health checks start at RUNNING, stop at the end."""
        if is_terminal(status.state):
            self.health.stop(framework_id, status.task_id)
        self.updates.update(framework_id, status)
        if status.state == common_pb2.TASK_RUNNING and not status.HasField("healthy"):
            self.health.start_run(self.tasks.find(framework_id, status.task_id), self.agent_id)

    def _send_update(self, framework_id: str, status: common_pb2.TaskStatus) -> bool:
        message = agent_link_pb2.AgentMessage(
            status_update=agent_link_pb2.AgentMessage.StatusUpdate(
                framework_id=framework_id, status=status
            )
        )
        return self.link.send(message)


def _host_towards(masters: MasterSet) -> str:
    """The local address this machine reaches the (first named) master from; loopback, with a
    warning, when that cannot be told (a name that does not resolve yet): the master then
    refuses the agent if it is on another machine, saying what to pass."""
    first = (masters.addresses or masters.zk_hosts.split(","))[0]
    found = source_address_towards(first)
    if found is None:
        log.warning(
            "cannot tell which address reaches the master: listening on 127.0.0.1; give --host",
            master=first,
        )
        return "127.0.0.1"
    return found


def _primary_ip() -> str:
    """The address of the interface that routes outwards (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
