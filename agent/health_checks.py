"""Health checks run by the agent next to each task (HTTP, TCP or a command), Mesos-style.

A task whose TaskInfo has a health_check gets a checker once it is RUNNING. The checker probes
it every interval and sends a reliable TASK_RUNNING update with `healthy` set whenever the
verdict changes: healthy on the first success, unhealthy after max_consecutive_failures failures
in a row. Failures within the grace period after launch are ignored until the task has been
healthy once (it may still be starting). The agent only reports: the framework decides whether
an unhealthy task is killed, so it can keep enough instances up during a health-check storm.

`HealthVerdict` is the pure counting part; `probe()` does one check; `HealthCheckManager` runs
one asyncio task per checked task and emits the updates.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import structlog

from agora.agent.task_env import base_environment
from agora.agent.task_user import TaskUser
from agora.common import new_uuid
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

# What a zero (unset) field of HealthCheck means, as in Mesos (except delay: start at once).
DEFAULT_INTERVAL = 10.0
DEFAULT_TIMEOUT = 20.0
DEFAULT_MAX_FAILURES = 3
REASON = "REASON_TASK_HEALTH_CHECK_STATUS_UPDATED"
CHECK_HOST = "127.0.0.1"  # tasks share the agent's network: check them over loopback


class _Timing(TypedDict):
    """CheckSpec's timing fields, as HealthCheck gives them (with defaults applied)."""

    grace_period: float
    interval: float
    timeout: float
    max_failures: int
    delay: float


class _AsUser(TypedDict, total=False):
    """create_subprocess_exec's arguments that switch to the task's user."""

    user: int
    group: int
    extra_groups: tuple[int, ...]


@dataclass(frozen=True)
class CheckSpec:
    """One task's health check with defaults applied and its port resolved."""

    kind: str  # "http", "tcp" or "command"
    port: int = 0
    path: str = "/"
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    grace_period: float = 0.0
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    max_failures: int = DEFAULT_MAX_FAILURES
    delay: float = 0.0

    @classmethod
    def from_proto(cls, check: common_pb2.HealthCheck, ports: list[int]) -> CheckSpec | None:
        """None when the task has no health check; ValueError when it cannot be run."""
        kind = check.WhichOneof("check")
        if kind is None:
            return None
        timing = _Timing(
            grace_period=max(check.grace_period_seconds, 0.0),
            interval=check.interval_seconds if check.interval_seconds > 0 else DEFAULT_INTERVAL,
            timeout=check.timeout_seconds if check.timeout_seconds > 0 else DEFAULT_TIMEOUT,
            max_failures=check.max_consecutive_failures or DEFAULT_MAX_FAILURES,
            delay=max(check.delay_seconds, 0.0),
        )
        if kind in ("http", "tcp"):
            index = getattr(check, kind).port_index
            if index >= len(ports):
                raise ValueError(
                    f"{kind} health check names PORT{index}, but the task has {len(ports)} port(s)"
                )
            path = check.http.path if kind == "http" else "/"
            return cls(kind, port=ports[index], path=path or "/", **timing)
        from agora.agent.launcher import command_argv

        argv = tuple(command_argv(check.command))
        return cls(
            "command", argv=argv, env=tuple(sorted(check.command.environment.items())), **timing
        )

    def describe(self) -> str:
        if self.kind == "http":
            return f"HTTP GET {self.path} on port {self.port}"
        if self.kind == "tcp":
            return f"TCP connect to port {self.port}"
        return f"command {' '.join(self.argv)!r}"


class HealthVerdict:
    """Counts results into a verdict: None (not known yet), True or False. Pure."""

    def __init__(self, spec: CheckSpec, started_at: float) -> None:
        self.spec = spec
        self.started_at = started_at
        self.healthy: bool | None = None
        self.consecutive_failures = 0
        self.ever_healthy = False

    def record(self, ok: bool, now: float) -> bool | None:
        """Adds one result; returns the new verdict when it changed, else None."""
        if ok:
            self.consecutive_failures = 0
            self.ever_healthy = True
            return self._set(True)
        if not self.ever_healthy and now - self.started_at < self.spec.grace_period:
            return None  # still starting: failures in the grace period do not count
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.spec.max_failures:
            return self._set(False)
        return None

    def _set(self, healthy: bool) -> bool | None:
        if self.healthy is healthy:
            return None
        self.healthy = healthy
        return healthy


@dataclass(frozen=True)
class Inside:
    """Where a command check of a task in namespaces of its own runs: in the namespaces of
    its init (`pid`), through the C wrapper's --enter, in `cwd` as the task sees it."""

    wrapper: str
    pid: int
    started: int  # the init's start in clock ticks: a reused pid is refused
    cwd: str
    env: tuple[tuple[str, str], ...] = ()  # what differs in there (an image's sandbox path)


async def probe(
    spec: CheckSpec,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    user: TaskUser | None = None,
    inside: Inside | None = None,
) -> tuple[bool, str]:
    """Runs one check within its timeout: (ok, what happened). `inside`: a command check runs
    in the task's namespaces (its /tmp, its processes, an image's files), else on the host."""
    try:
        async with asyncio.timeout(spec.timeout):
            if spec.kind == "http":
                return await _probe_http(spec)
            if spec.kind == "tcp":
                _, writer = await asyncio.open_connection(CHECK_HOST, spec.port)
                await _close(writer)
                return True, "connected"
            return await _probe_command(spec, env, cwd, user, inside)
    except TimeoutError:
        return False, f"timed out after {spec.timeout:g}s"
    except OSError as e:
        return False, e.strerror or str(e)
    except (ValueError, RuntimeError) as e:  # e.g. a garbled reply: a failed check, not a crash
        return False, f"check failed: {e}"


async def _probe_http(spec: CheckSpec) -> tuple[bool, str]:
    reader, writer = await asyncio.open_connection(CHECK_HOST, spec.port)
    try:
        request = (
            f"GET {spec.path} HTTP/1.0\r\nHost: {CHECK_HOST}:{spec.port}\r\n"
            "User-Agent: agora-health-check\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        line = (await reader.readline()).decode(errors="replace").strip()
    finally:
        await _close(writer)
    parts = line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return False, f"not an HTTP response: {line[:80]!r}"
    code = int(parts[1])
    # Mesos and Marathon count 2xx and 3xx as healthy.
    return 200 <= code <= 399, f"HTTP {code}"


async def _probe_command(
    spec: CheckSpec,
    env: dict[str, str] | None,
    cwd: str | None,
    user: TaskUser | None = None,
    inside: Inside | None = None,
) -> tuple[bool, str]:
    full_env = dict(env if env is not None else base_environment())
    full_env.update(dict(spec.env))
    # A command check runs as the task runs: as its user, never with the agent's privileges;
    # in namespaces of its own, the wrapper enters them and becomes that user there, under
    # the task's capabilities and seccomp filter.
    as_user: _AsUser = {}
    argv = spec.argv
    if inside is not None:
        full_env.update(dict(inside.env))
        who = "-" if user is None else f"{user.uid}:{user.gid}:{','.join(map(str, user.groups))}"
        enter = f"--enter={inside.pid}:{inside.started}"
        argv = (inside.wrapper, enter, who, inside.cwd, "--", *spec.argv)
        cwd = None
    elif user is not None:
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": user.groups}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=full_env,
        cwd=cwd,
        **as_user,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        code = await proc.wait()
    except BaseException:
        # Timed out (or the checker stopped): take the check's whole process group with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            await proc.wait()
        raise
    return code == 0, f"exited with code {code}"


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


@dataclass
class CheckedTask:
    """What the manager needs of a task run (see TaskManager's TaskRun)."""

    framework_id: str
    task: common_pb2.TaskInfo
    env: dict[str, str]
    sandbox: str
    # False once the task ended or was forgotten: the checker stops quietly.
    is_live: Callable[[], bool]
    # The user the task runs as (None: the agent's own): command checks run as it too.
    user: TaskUser | None = None
    # Where command checks run, asked before each (None: on the host, as a plain task runs).
    inside: Callable[[], Inside | None] = lambda: None


# emit(framework_id, status): a reliable status update, as TaskManager's.
EmitFn = Callable[[str, common_pb2.TaskStatus], None]


class HealthCheckManager:
    """One checker task per health-checked task; verdict changes leave through `emit`."""

    def __init__(
        self,
        emit: EmitFn,
        agent_id: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
        base_env: dict[str, str] | None = None,
    ) -> None:
        """`base_env`: what a command check's environment starts from, as its task's does
        (agent/task_env.py)."""
        self._emit = emit
        self._base_env = base_environment() if base_env is None else base_env
        self._agent_id = agent_id
        self._clock = clock
        self._checkers: dict[tuple[str, str], asyncio.Task] = {}
        self._verdicts: dict[tuple[str, str], HealthVerdict] = {}
        # The C wrapper, which enters a task's namespaces ("": none here; None: not looked for).
        self._wrapper: str | None = None

    def healthy(self, framework_id: str, task_id: str) -> bool | None:
        verdict = self._verdicts.get((framework_id, task_id))
        return None if verdict is None else verdict.healthy

    def checking(self, framework_id: str, task_id: str) -> bool:
        return (framework_id, task_id) in self._checkers

    def start(self, checked: CheckedTask, ports: list[int]) -> None:
        """Starts checking a running task (no-op without a health check, or if already)."""
        key = (checked.framework_id, checked.task.task_id)
        if key in self._checkers or not checked.task.HasField("health_check"):
            return
        bound = log.bind(framework_id=checked.framework_id, task_id=checked.task.task_id)
        try:
            spec = CheckSpec.from_proto(checked.task.health_check, ports)
        except ValueError as e:
            bound.warning("cannot run the task's health check", error=str(e))
            self._report(checked, False, f"health check cannot run: {e}")
            return
        if spec is None:
            return
        verdict = HealthVerdict(spec, self._clock())
        self._verdicts[key] = verdict
        bound.info("starting health checks", check=spec.describe(), interval=spec.interval)
        task = asyncio.create_task(
            self._run(checked, spec, verdict), name=f"health-{checked.task.task_id}"
        )
        self._checkers[key] = task
        task.add_done_callback(functools.partial(self._done, key))

    def start_run(self, run, agent_id: str) -> None:
        """Starts checking a TaskManager run (a TaskRun, or None: nothing to do)."""
        if run is None or not run.task.HasField("health_check"):
            return
        from agora.agent import launcher
        from agora.agent.task_manager import is_terminal

        framework_id = run.record.framework_id
        env = launcher.task_environment(
            self._base_env, run.task, framework_id, agent_id, run.sandbox, run.user
        )
        checked = CheckedTask(
            framework_id,
            run.task,
            env,
            str(run.sandbox),
            lambda: not run.forgotten and not is_terminal(run.state),
            run.user,
            functools.partial(self._inside, run),
        )
        self.start(checked, launcher.task_ports(run.task))

    def _inside(self, run) -> Inside | None:
        """Where `run`'s command checks run: in its namespaces when it has its own (found
        from its processes, so also after the agent re-attached), else on the host."""
        from agora.agent.oci import SANDBOX
        from agora.agent.task_namespaces import namespace_init

        if run.wrapper is None:
            return None
        init = namespace_init(run.wrapper.task_pid, run.wrapper.wrapper_pid)
        if init is None:
            return None
        if self._wrapper is None:
            from agora.agent import native_wrapper

            self._wrapper = native_wrapper.wrapper_path() or ""
        if not self._wrapper:
            return None
        pid, started = init
        if not run.task.container.image:
            return Inside(self._wrapper, pid, started, str(run.sandbox))
        moved = (("AGORA_SANDBOX", SANDBOX), ("MESOS_SANDBOX", SANDBOX))
        return Inside(self._wrapper, pid, started, SANDBOX, moved)

    def stop(self, framework_id: str, task_id: str) -> None:
        task = self._checkers.pop((framework_id, task_id), None)
        self._verdicts.pop((framework_id, task_id), None)
        if task is not None:
            task.cancel()

    async def stop_all(self) -> None:
        tasks = list(self._checkers.values())
        self._checkers.clear()
        self._verdicts.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, checked: CheckedTask, spec: CheckSpec, verdict: HealthVerdict) -> None:
        if spec.delay > 0:
            await asyncio.sleep(spec.delay)
        while checked.is_live():
            ok, detail = await probe(
                spec, checked.env, checked.sandbox, checked.user, checked.inside()
            )
            if not checked.is_live():
                return
            changed = verdict.record(ok, self._clock())
            if changed is not None:
                text = (
                    f"health check passed ({spec.describe()}: {detail})"
                    if changed
                    else f"unhealthy: {verdict.consecutive_failures} consecutive failure(s) of "
                    f"{spec.describe()}, last: {detail}"
                )
                log.info(
                    "task health changed",
                    framework_id=checked.framework_id,
                    task_id=checked.task.task_id,
                    healthy=changed,
                    detail=detail,
                )
                self._report(checked, changed, text)
            await asyncio.sleep(spec.interval)

    def _report(self, checked: CheckedTask, healthy: bool, message: str) -> None:
        status = common_pb2.TaskStatus(
            task_id=checked.task.task_id,
            state=common_pb2.TASK_RUNNING,
            message=message,
            source=common_pb2.TaskStatus.SOURCE_AGENT,
            reason=REASON,
            agent_id=self._agent_id(),
            framework_id=checked.framework_id,
            timestamp=time.time(),
            uuid=new_uuid(),
            healthy=healthy,
        )
        self._emit(checked.framework_id, status)

    def _done(self, key: tuple[str, str], task: asyncio.Task) -> None:
        if self._checkers.get(key) is task:
            del self._checkers[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("health checker failed", task_id=key[1], exc_info=task.exception())
