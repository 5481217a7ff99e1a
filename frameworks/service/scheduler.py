"""The service scheduler: a Framework that keeps every app at its wanted healthy instances.

State lives here (apps, instances, backoffs) and in the store; decisions come from the pure
modules (deploy.plan, placement.place, waiting.why_waiting, RestartBackoff) and what the API
shows from views. `converge()` runs after every
change and on a timer: it kills what the plan says, works out why instances wait, revives or
suppresses offers, and tells endpoint watchers. Launches happen in `on_offers`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog

from agora.common import Resources
from agora.common.task_states import REASON_AGENT_DRAINED, REASON_PREEMPTED, is_over
from agora.frameworks.sdk import (
    Driver,
    Framework,
    SchedulerError,
    TaskSpec,
    new_task_id,
    state_name,
)
from agora.frameworks.service import apps as appdefs
from agora.frameworks.service import views
from agora.frameworks.service.backoff import RestartBackoff
from agora.frameworks.service.deploy import plan
from agora.frameworks.service.instances import Instance
from agora.frameworks.service.placement import AgentSlot, Request, offer_host, place
from agora.frameworks.service.store import ServiceStore
from agora.frameworks.service.waiting import needs_of, why_waiting
from agora.v1 import common_pb2, services_pb2

log = structlog.get_logger(__name__)

App = services_pb2.App
# Re-send a kill that has not ended the task after this long (lost on a reconnect, say).
KILL_RETRY_SECONDS = 10.0
# Offers declined while something waits come back this soon (or when we revive).
WAITING_REFUSE_SECONDS = 2.0
IDLE_REFUSE_SECONDS = 30.0
# An instance not RUNNING this long after its launch is killed and replaced (Marathon's
# task_launch_timeout): its launch was lost, or it hangs while starting.
LAUNCH_TIMEOUT_SECONDS = 300.0
# An instance serving this long ends a crash loop: the app's restart backoff starts over. (Not
# at once: a task that passes one health check and then dies is still crash-looping.)
STABLE_SECONDS = 30.0

CatalogFn = Callable[[], Awaitable[list[AgentSlot]]]


@dataclass
class AppRecord:
    app: App
    backoff: RestartBackoff
    waiting_reason: str = ""
    unplaceable: bool = False
    # What the last round of offers said about instances that did not fit.
    offer_note: str = ""
    watchers: set[asyncio.Queue] = field(default_factory=set)
    last_endpoints: tuple = ()
    # What people ask first of an app that keeps restarting: the last failure of each kind.
    last_failure: tuple[str, float] = ("", 0.0)
    last_health_failure: tuple[str, float] = ("", 0.0)
    # And of an instance the cluster stopped for another role (not a failure: replaced at once).
    last_preemption: tuple[str, float] = ("", 0.0)


def _backoff_for(app: App) -> RestartBackoff:
    b = app.backoff
    return RestartBackoff(b.backoff_seconds, b.backoff_factor, b.max_launch_delay_seconds)


class ServiceScheduler(Framework):
    def __init__(
        self,
        store: ServiceStore,
        role: str = "*",
        catalog: CatalogFn | None = None,
        clock: Callable[[], float] = time.time,
        launch_timeout: float = LAUNCH_TIMEOUT_SECONDS,
    ) -> None:
        self.store = store
        self.launch_timeout = launch_timeout
        self.role = role
        self.clock = clock
        self._catalog_fn = catalog
        self.catalog: list[AgentSlot] | None = None  # None: not known yet
        self.apps: dict[str, AppRecord] = {}
        self.instances: dict[str, Instance] = {}
        self.driver: Driver | None = None
        self.suppressed = False
        self._wanted_before = False
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._kill_sent: dict[str, float] = {}
        # Agents an operator drains, and their deadlines (0: none): instances there are moved.
        self.draining_agents: dict[str, float] = {}
        for app in store.apps():
            self.apps[app.id] = AppRecord(app, _backoff_for(app))
        for instance in store.instances():
            self.instances[instance.task_id] = instance

    # --- queries ------------------------------------------------------------------------------

    def instances_of(self, app_id: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.app_id == app_id]

    def endpoints(self, app_id: str) -> services_pb2.Endpoints:
        return views.endpoints(self.apps[app_id].app, self.instances_of(app_id))

    def status(self, app_id: str) -> services_pb2.AppStatus:
        record = self.apps[app_id]
        status = views.app_status(
            record.app,
            self.instances_of(app_id),
            record.backoff,
            record.waiting_reason,
            record.unplaceable,
            self.clock(),
        )
        status.last_failure, status.last_failure_at = record.last_failure
        status.last_health_failure, status.last_health_failure_at = record.last_health_failure
        status.last_preemption, status.last_preemption_at = record.last_preemption
        return status

    # --- API operations (called by the gRPC servicer) ----------------------------------------

    async def put_app(self, app: App, create_only: bool = False) -> tuple[App, bool, bool]:
        """Creates or updates an app; returns (stored app, created, deploying)."""
        app = appdefs.normalize(app)
        if app.role not in ("*", self.role):
            raise appdefs.AppError(
                f"app {app.id}: role {app.role!r} is not usable; the "
                f"service framework runs as role {self.role!r}"
            )
        await self.refresh_catalog()
        self._check_fits_somewhere(app)
        existing = self.apps.get(app.id)
        if existing is not None and create_only:
            raise appdefs.AppError(
                f"app {app.id} already exists; update it without create-only, or delete it first",
                "ALREADY_EXISTS",
            )
        if existing is not None and appdefs.definition_key(existing.app) == appdefs.definition_key(
            app
        ):
            app.version = existing.app.version  # only the instance count (if anything) changed
        else:
            app.version = appdefs.new_version(self.clock())
            if existing is not None and app.version <= existing.app.version:
                app.version = existing.app.version + "+"  # same microsecond: keep it sortable
        self.store.put_app(app)
        deploying = (
            existing is not None
            and app.version != existing.app.version
            and any(not i.ended for i in self.instances_of(app.id))
        )
        if existing is None:
            self.apps[app.id] = AppRecord(app, _backoff_for(app))
        else:
            existing.app = app
            existing.backoff = _backoff_for(app)
        log.info(
            "app stored",
            app_id=app.id,
            version=app.version,
            instances=app.instances,
            created=existing is None,
            deploying=deploying,
        )
        self.wake()
        return app, existing is None, deploying

    async def scale_app(self, app_id: str, instances: int) -> App:
        record = self._record(app_id)
        if not 0 <= instances <= appdefs.MAX_INSTANCES:
            raise appdefs.AppError(
                f"instances must be between 0 and {appdefs.MAX_INSTANCES}, got {instances}"
            )
        app = App()
        app.CopyFrom(record.app)
        app.instances = instances
        self.store.put_app(app)
        record.app = app
        record.backoff.reset()
        log.info("app scaled", app_id=app_id, instances=instances)
        self.wake()
        return app

    async def delete_app(self, app_id: str) -> None:
        record = self._record(app_id)
        self.store.delete_app(app_id)
        del self.apps[app_id]
        for queue in record.watchers:
            queue.put_nowait(None)  # ends the watch streams
        log.info("app deleted", app_id=app_id)
        self.wake()  # converge kills its instances: they belong to no app now

    def watch(self, app_id: str) -> asyncio.Queue:
        record = self._record(app_id)
        self._notify_watchers()  # bring earlier watchers up to date: the new one starts here
        queue: asyncio.Queue = asyncio.Queue()
        queue.put_nowait(self.endpoints(app_id))
        record.watchers.add(queue)
        return queue

    def unwatch(self, app_id: str, queue: asyncio.Queue) -> None:
        record = self.apps.get(app_id)
        if record is not None:
            record.watchers.discard(queue)

    def close_watchers(self) -> None:
        """Ends every watch stream (the daemon is stopping)."""
        for record in self.apps.values():
            for queue in record.watchers:
                queue.put_nowait(None)

    def require(self, app_id: str) -> None:
        """AppError NOT_FOUND unless the app exists."""
        self._record(app_id)

    def _record(self, app_id: str) -> AppRecord:
        record = self.apps.get(app_id)
        if record is None:
            raise appdefs.AppError(
                f"no app {app_id!r}; `agora app list` shows the apps", "NOT_FOUND"
            )
        return record

    def _check_fits_somewhere(self, app: App) -> None:
        if not self.catalog:
            return  # no agents known (yet): the app waits, and says so
        needs = needs_of(app)
        if all(needs.shortfall(s.total.allocatable_to(app.role)) for s in self.catalog):
            largest = max(self.catalog, key=lambda s: s.total.scalar("cpus"))
            raise appdefs.AppError(
                f"app {app.id}: each instance needs {needs.describe()}, more than any agent "
                f"has (largest: {largest.facts.hostname} with {largest.total.format()})",
                "FAILED_PRECONDITION",
            )

    # --- the loop -----------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def run(self, interval: float = 1.0, catalog_every: float = 2.0) -> None:
        """Converges after every wake-up and at least every `interval` seconds, and refreshes
        the list of agents every `catalog_every` seconds (apart, so that a master slow to
        answer never holds up kills and launches)."""
        catalog = asyncio.create_task(
            self._refresh_catalog_every(catalog_every), name="services-catalog"
        )
        try:
            while True:
                try:
                    async with asyncio.timeout(interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                try:
                    await self.converge()
                except Exception:
                    log.exception("converging failed; trying again")
        finally:
            catalog.cancel()
            await asyncio.gather(catalog, return_exceptions=True)

    async def _refresh_catalog_every(self, seconds: float) -> None:
        while True:
            before = self.catalog
            await self.refresh_catalog()
            if self.catalog != before:
                self.wake()  # agents came or went: reasons and placeability may change
            await asyncio.sleep(seconds)

    async def refresh_catalog(self) -> None:
        if self._catalog_fn is None:
            return
        try:
            self.catalog = await self._catalog_fn()
        except Exception as e:  # the master may be restarting: keep the last view
            log.debug("cannot list agents", error=str(e))

    async def converge(self) -> None:
        async with self._lock:
            await self._converge()

    async def _converge(self) -> None:
        now = self.clock()
        wants_offers = False
        for record in list(self.apps.values()):
            app = record.app
            mine = [i for i in self.instances_of(app.id) if not i.ended]
            decision = plan(app.instances, app.version, self._views(mine), appdefs.strategy_of(app))
            for task_id, why in decision.kill:
                instance = self.instances.get(task_id)  # may have ended meanwhile
                if instance is not None and not instance.ended:
                    await self._kill(instance, why)
            if record.backoff.failures and any(
                i.serving and i.running_since and now - i.running_since >= STABLE_SECONDS
                for i in mine
            ):
                record.backoff.reset()
            missing = app.instances - sum(
                1
                for i in mine
                if i.version == app.version
                and not i.killing
                and i.agent_id not in self.draining_agents
            )
            record.waiting_reason, record.unplaceable = self._why_waiting(
                record, missing, decision.launch, now
            )
            if decision.launch > 0 and record.backoff.ready(now) and not record.unplaceable:
                wants_offers = True
        for instance in list(self.instances.values()):
            if instance.app_id not in self.apps and not instance.ended:
                await self._kill(instance, "its app was deleted")
            elif (
                not instance.running
                and not instance.killing
                and not instance.ended
                and now - instance.launched_at > self.launch_timeout
            ):
                await self._kill(instance, f"not running {self.launch_timeout:g}s after launch")
            elif (
                instance.killing
                and not instance.ended
                and time.monotonic() - self._kill_sent.get(instance.task_id, 0) > KILL_RETRY_SECONDS
            ):
                await self._send_kill(instance)
        await self._offers_wanted(wants_offers)
        self._notify_watchers()

    def _why_waiting(
        self, record: AppRecord, missing: int, launch: int, now: float
    ) -> tuple[str, bool]:
        live = [i for i in self.instances_of(record.app.id) if not i.ended and not i.killing]
        return why_waiting(
            record.app, missing, launch, live, self.catalog, record.backoff, record.offer_note, now
        )

    async def _offers_wanted(self, wanted: bool) -> None:
        driver = self.driver
        if driver is None or not driver.connected:
            return
        try:
            # Reviving also clears the filters of offers declined while nothing was wanted.
            if wanted and (self.suppressed or not self._wanted_before):
                await driver.revive()
                self.suppressed = False
                log.debug("revived offers")
            elif not wanted and not self.suppressed:
                await driver.suppress()
                self.suppressed = True
        except SchedulerError as e:
            log.warning("revive/suppress failed", error=str(e))
            return
        self._wanted_before = wanted

    async def _kill(self, instance: Instance, why: str) -> None:
        if not instance.killing:
            instance.killing = True
            instance.kill_reason = why
            self.store.put_instance(instance)
            log.info("killing instance", app_id=instance.app_id, task_id=instance.task_id, why=why)
        await self._send_kill(instance)

    async def _send_kill(self, instance: Instance) -> None:
        driver = self.driver
        if driver is None or not driver.connected:
            return
        self._kill_sent[instance.task_id] = time.monotonic()
        try:
            await driver.kill(instance.task_id, instance.agent_id)
        except SchedulerError as e:
            log.warning("kill failed; will retry", task_id=instance.task_id, error=str(e))

    def _notify_watchers(self) -> None:
        for app_id, record in self.apps.items():
            reply = self.endpoints(app_id)
            key = views.endpoints_key(reply)
            if key != record.last_endpoints:
                record.last_endpoints = key
                for queue in record.watchers:
                    queue.put_nowait(reply)

    # --- Framework callbacks ------------------------------------------------------------------

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        # The master tells the drains that last right after SUBSCRIBED: what was known
        # before may have ended while we were away.
        self.draining_agents.clear()
        self.driver = driver
        self.suppressed = False  # a new subscription starts unsuppressed
        self._wanted_before = False
        if self.store.framework_id() != framework_id:
            self.store.set_framework_id(framework_id)
        log.info(
            "subscribed",
            framework_id=framework_id,
            apps=len(self.apps),
            instances=len(self.instances),
        )
        # Ask about every task we know: one the master has never heard of comes back UNKNOWN
        # (e.g. launched just before a crash, and the launch never arrived).
        known = [(i.task_id, i.agent_id) for i in self.instances.values() if not i.ended]
        if known:
            try:
                await driver.reconcile(known)
            except SchedulerError as e:
                log.warning("reconciliation failed", error=str(e))
        self.wake()

    async def on_disconnected(self, driver: Driver) -> None:
        log.warning("disconnected from the master; reconnecting")

    async def on_update(self, driver: Driver, status: common_pb2.TaskStatus) -> None:
        instance = self.instances.get(status.task_id)
        bound = log.bind(task_id=status.task_id, state=state_name(status.state))
        if instance is None:
            if not is_over(status.state):
                bound.info("killing a task no app owns")
                try:
                    await driver.kill(status.task_id, status.agent_id or None)
                except SchedulerError as e:
                    bound.warning("kill failed", error=str(e))
            return
        now = self.clock()
        record = self.apps.get(instance.app_id)
        before = instance.healthy
        instance.state = status.state
        instance.message = status.message
        if status.HasField("healthy"):
            instance.healthy = status.healthy
            if not status.healthy and record is not None:
                record.last_health_failure = (
                    f"task {status.task_id}: {status.message or 'health check failed'}",
                    time.time(),
                )
        if status.agent_id:
            instance.agent_id = status.agent_id
        if is_over(status.state):
            del self.instances[instance.task_id]
            self._kill_sent.pop(instance.task_id, None)
            self.store.delete_instance(instance.task_id)
            # Stopped by the cluster (preempted, its agent drained): replaced, not held back.
            stopped = status.reason in (REASON_PREEMPTED, REASON_AGENT_DRAINED)
            failed = not stopped and (
                not instance.killing
                or instance.kill_reason == "unhealthy"
                or instance.kill_reason.startswith("not running")
            )
            if record is not None and status.reason == REASON_PREEMPTED:
                record.last_preemption = (_preempted(status), time.time())
                bound.warning(
                    "instance preempted; replacing it",
                    app_id=instance.app_id,
                    message=status.message,
                )
            elif record is not None and failed:
                record.last_failure = (
                    f"task {status.task_id} {state_name(status.state)}: "
                    f"{status.message or instance.kill_reason or 'no message'}",
                    time.time(),
                )
                until = record.backoff.failed(now)
                bound.warning(
                    "instance ended; replacing it after backoff",
                    app_id=instance.app_id,
                    message=status.message,
                    backoff=round(until - now, 3),
                )
            else:
                bound.info("instance ended", app_id=instance.app_id, message=status.message)
        else:
            self.store.put_instance(instance)
            if instance.running and not instance.running_since:
                instance.running_since = now
                self.store.put_instance(instance)
            if instance.healthy != before:
                bound.info(
                    "instance health changed", app_id=instance.app_id, healthy=instance.healthy
                )
        self.wake()
        self._notify_watchers()

    def _views(self, instances: list[Instance]):
        """The instances as the planner sees them, those on draining agents marked."""
        return [i.view(i.agent_id in self.draining_agents) for i in instances]

    async def on_preemption(
        self, driver: Driver, task_id: str, agent_id: str, message: str, deadline: float
    ) -> None:
        """The master stops one of our instances for another role: it ends TASK_KILLED with
        REASON_PREEMPTED by `deadline`, and on_update replaces it and reports it on its app."""
        instance = self.instances.get(task_id)
        log.info(
            "instance being preempted",
            task_id=task_id,
            app_id=instance.app_id if instance is not None else None,
            message=message,
            seconds_left=round(max(0.0, deadline - time.time()), 1),
        )

    async def on_agent_lost(self, driver: Driver, agent_id: str) -> None:
        self.draining_agents.pop(agent_id, None)  # its instances come as TASK_LOST

    async def on_agent_drain(
        self, driver: Driver, agent_id: str, draining: bool, deadline: float
    ) -> None:
        """Instances on a draining agent are replaced elsewhere, each killed once its app is
        at its healthy capacity without it (deploy.plan); the master kills what is left at
        the deadline."""
        if draining:
            self.draining_agents[agent_id] = deadline
        else:
            self.draining_agents.pop(agent_id, None)
        log.info(
            "agent draining: moving its instances" if draining else "agent undrained",
            agent_id=agent_id,
            instances=sum(1 for i in self.instances.values() if i.agent_id == agent_id),
        )
        self.wake()

    async def on_offers(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        async with self._lock:
            await self._on_offers(driver, offers)

    async def _on_offers(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        now = self.clock()
        requests = []
        versions: dict[str, str] = {}  # as launched: the app may change while we await
        for record in self.apps.values():
            app = record.app
            mine = [i for i in self.instances_of(app.id) if not i.ended]
            to_launch = plan(
                app.instances, app.version, self._views(mine), appdefs.strategy_of(app)
            ).launch
            if to_launch <= 0 or not record.backoff.ready(now) or record.unplaceable:
                continue
            versions[app.id] = app.version
            requests.append(
                Request(
                    app_id=app.id,
                    count=to_launch,
                    needs=needs_of(app),
                    constraints=appdefs.constraints_of(app),
                    placed=[i.facts() for i in mine if not i.killing],
                    make_spec=functools.partial(_task_spec, app),
                )
            )
        if not requests:
            await self._decline(driver, offers, IDLE_REFUSE_SECONDS)
            return
        all_agents = [s.facts for s in self.catalog or []]
        result = place(offers, requests, self.role, all_agents)
        for launch in result.launches:
            host = offer_host(launch.offers[0])
            created = []
            for app_id, task, agent in launch.tasks:
                instance = Instance(
                    task_id=task.task_id,
                    app_id=app_id,
                    version=versions[app_id],
                    agent_id=agent.agent_id,
                    hostname=agent.hostname,
                    host=host,
                    ports=_ports(task),
                    attributes=dict(agent.attributes),
                    launched_at=now,
                    has_check=task.HasField("health_check"),
                )
                # Stored before the launch leaves: a crash in between is reconciled later.
                self.store.put_instance(instance)
                self.instances[instance.task_id] = instance
                created.append(instance)
            try:
                await driver.launch(
                    launch.offers, [t for _, t, _ in launch.tasks], refuse_seconds=0
                )
            except SchedulerError as e:
                log.warning("launch refused; will retry", agent_id=launch.agent_id, error=str(e))
                for instance in created:
                    del self.instances[instance.task_id]
                    self.store.delete_instance(instance.task_id)
                continue
            for instance in created:
                log.info(
                    "launched instance",
                    app_id=instance.app_id,
                    task_id=instance.task_id,
                    hostname=instance.hostname,
                    ports=instance.ports,
                )
        for request in requests:
            current = self.apps.get(request.app_id)
            if current is None:
                continue  # deleted meanwhile: converge kills what was launched
            reasons = result.reasons.get(request.app_id)
            current.offer_note = "; ".join(reasons[:3]) if reasons else ""
        await self._decline(driver, result.unused, WAITING_REFUSE_SECONDS)
        placed: dict[str, int] = {}
        for launch in result.launches:
            for app_id, _, _ in launch.tasks:
                placed[app_id] = placed.get(app_id, 0) + 1
        await self._tell_demand(
            driver, [r.app_id for r in requests if r.count > placed.get(r.app_id, 0)]
        )
        self.wake()

    async def _tell_demand(self, driver: Driver, unplaced: list[str]) -> None:
        """Tells the master the instance it could not place (the highest priority, then the
        smallest): where preemption is on, the master makes room. The driver sends it only
        when it changed."""
        apps = [self.apps[a].app for a in unplaced if a in self.apps]
        first = min(apps, key=lambda a: (-a.priority, a.cpus, a.mem), default=None)
        try:
            if first is None:
                await driver.demand(None)
            else:
                size = Resources.of(cpus=first.cpus, mem=first.mem, disk=first.disk)
                await driver.demand(size, first.priority)
        except SchedulerError as e:
            log.debug("demand not told", error=str(e))

    async def _decline(
        self, driver: Driver, offers: Sequence[common_pb2.Offer], refuse: float
    ) -> None:
        if not offers:
            return
        try:
            await driver.decline(offers, refuse_seconds=refuse)
        except SchedulerError as e:
            log.debug("decline failed", error=str(e))


def _preempted(status: common_pb2.TaskStatus) -> str:
    """For the app's status: "instance X preempted: role b needs ... (guarantee)" (the master's
    message names who needed what)."""
    why = status.message or "preempted"
    if not why.startswith("preempted"):
        why = f"preempted: {why}"
    return f"instance {status.task_id} {why}"


def _task_spec(app: App) -> TaskSpec:
    return TaskSpec(
        name=app.id,
        cpus=app.cpus,
        mem=app.mem,
        disk=app.disk,
        ports=app.ports,
        command=appdefs.command_of(app),
        task_id=new_task_id(app.id),
        labels={"app": app.id, "version": app.version, **dict(app.labels)},
        kill_grace_period_seconds=app.kill_grace_period_seconds,
        health_check=app.health_check if app.HasField("health_check") else None,
        priority=app.priority,
        image=app.container.image,
        network=app.container.network if app.container.image else "",
    )


def _ports(task: common_pb2.TaskInfo) -> list[int]:
    ranges = Resources.from_proto(task.resources).port_ranges()
    return [port for begin, end in ranges for port in range(begin, end + 1)]
