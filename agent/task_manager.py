"""The agent's tasks: launch, watch, kill, and recover them after a restart.

Every task run has a record in the work dir (agora.agent.checkpoint) written before its wrapper
starts, so a restarted agent knows each task it was running: still-running wrappers are
re-attached, and tasks that ended meanwhile get their terminal update from the exit file.
Status updates leave through `emit`, which checkpoints them for reliable delivery.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agora.agent import cgroup_members, launcher
from agora.agent.aio_util import cancel_and_wait
from agora.agent.checkpoint import TaskRecord, WorkDir, b64
from agora.agent.clock import SYSTEM_CLOCK, AgentClock
from agora.agent.containers import DEFAULT_TMP_MB, ContainerError, Containers
from agora.agent.gpus import GpuError, GpuSet, device_nodes, visible_env
from agora.agent.images import ImageStore
from agora.agent.isolation import Isolator, task_limits
from agora.agent.launch_spec import LaunchSpec
from agora.agent.metrics import AgentMetrics
from agora.agent.spawners import OneShotSpawner
from agora.agent.task_env import base_environment
from agora.agent.task_user import TaskUser, TaskUserError, resolve_task_user
from agora.common import ResourceError, Resources, new_id, new_uuid
from agora.common.task_states import is_terminal
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

DEFAULT_KILL_GRACE = 3.0
# The longest grace the agent gives a task that ignores SIGTERM, whatever it asked for (the
# master refuses longer ones; this holds for any master).
MAX_KILL_GRACE = 300.0
# Completed runs remembered (for reading their sandboxes) beyond the ones still active.
COMPLETED_HISTORY = 1000

# emit(framework_id, status): checkpoint and deliver a reliable status update.
EmitFn = Callable[[str, common_pb2.TaskStatus], None]


def bad_id_reason(value: str, what: str) -> str | None:
    """Ids become directory names: refuse anything that could leave the sandboxes dir."""
    if not value:
        return f"{what} is empty"
    if value in (".", "..") or "/" in value or "\0" in value or len(value) > 200:
        return f"{what} {value!r} is not usable as a directory name"
    return None


@dataclass
class TaskRun:
    """One run of a task on this agent."""

    record: TaskRecord
    task: common_pb2.TaskInfo
    wrapper: launcher.RunningWrapper | None = None
    kill_requested: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when the agent was removed: the run ends without any further update.
    forgotten: bool = False
    # The user to switch to (None: the agent's own); resolved again when re-attaching.
    user: TaskUser | None = None
    # When the RunTask arrived (monotonic), for the launch-time metric.
    received: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[str, str]:
        return self.record.framework_id, self.task.task_id

    @functools.cached_property
    def resources(self) -> Resources:
        """The task's resources, parsed once (the launch and the sandbox watch read them)."""
        return _resources(self.task)

    @property
    def sandbox(self) -> Path:
        return Path(self.record.sandbox)

    @property
    def state(self) -> common_pb2.TaskState:
        return self.record.state


class TaskManager:
    def __init__(
        self,
        work_dir: WorkDir,
        emit: EmitFn,
        agent_id: Callable[[], str],
        default_kill_grace: float = DEFAULT_KILL_GRACE,
        base_env: dict[str, str] | None = None,
        isolator: Isolator | None = None,
        cpu_hard_limit: bool = False,
        pids_max: int | None = None,
        containers: Containers | None = None,
        gpus: GpuSet | None = None,
        namespaces: bool = False,
        use_launcher: bool = True,
        metrics: AgentMetrics | None = None,
        completed_history: int = COMPLETED_HISTORY,
        task_launcher: launcher.TaskLauncher | None = None,
        clock: AgentClock = SYSTEM_CLOCK,
    ) -> None:
        """`task_launcher`: how wrappers start (default: a `Launcher` choosing its spawners at
        its start; the agent's harness gives a fake); `clock`: the wall clock and sleeps."""
        self._work = work_dir
        # Completed runs remembered, like Mesos' --max_completed_executors_per_framework.
        self._history = completed_history
        self._metrics = metrics
        self._emit = emit
        self._agent_id = agent_id
        self._default_grace = default_kill_grace
        # What every task's environment starts from (agent/task_env.py): never the agent's own.
        self._base_env = base_environment() if base_env is None else base_env
        self._isolator = isolator or Isolator(enabled=False)
        self._watching = False  # from recover() to stop(): see WorkDir.unwatched
        self._cpu_hard_limit = cpu_hard_limit
        self._pids_max = pids_max  # every task's process count bound (None: none)
        # Tasks from images (agent/containers.py): the images in the work dir, run by runc.
        self._containers = containers or Containers(ImageStore(work_dir.root / "images"))
        # The agent's GPUs, each held by one run at a time (agent/gpus.py); none: no GPUs.
        self._gpus = gpus or GpuSet(())
        # Plain tasks in namespaces of their own (the C wrapper's --ns): --task-namespaces.
        self._namespaces = namespaces
        self._runs: dict[str, TaskRun] = {}  # run_id -> run, in launch order
        self._active: dict[tuple[str, str], TaskRun] = {}  # (fw, task_id) -> non-completed run
        self._completed: deque[str] = deque()  # run ids of completed runs, oldest first
        # Sandboxes of completed runs, oldest first, with when they completed (wall clock), for
        # the garbage collector (sandbox_watch.py); they outlive the runs' history.
        self._gc_queue: deque[tuple[float, Path]] = deque()
        self._bg: set[asyncio.Task] = set()
        # Its spawners are chosen at its first start (agent/spawners.py); without use_launcher,
        # only the one-shot route: one `python -m` per task.
        self._clock = clock
        self._launcher: launcher.TaskLauncher = task_launcher or launcher.Launcher(
            work_dir.meta / "launcher.log", None if use_launcher else [OneShotSpawner()]
        )

    @property
    def spawns_wrappers(self) -> bool:
        """Whether task wrappers are this process's own children (not the fork server's)."""
        return self._launcher.spawns_directly

    async def start_launcher(self) -> None:
        """Chooses and starts the spawners now rather than on the first launch."""
        await self._launcher.start()

    # queries ----------------------------------------------------------------------------

    def find(self, framework_id: str, task_id: str) -> TaskRun | None:
        """The latest run of the task; framework_id may be empty when task_id is unique."""
        # An active run is the task's latest (a new run waits for the old one to complete),
        # and every status update looks its task up here: no scan of the whole history.
        if framework_id and (run := self._active.get((framework_id, task_id))) is not None:
            return run
        matches = [
            r
            for r in self._runs.values()
            if r.task.task_id == task_id
            and (not framework_id or r.record.framework_id == framework_id)
        ]
        if not matches:
            return None
        return max(matches, key=lambda r: r.record.launched_at)

    def runs(self) -> list[TaskRun]:
        return list(self._runs.values())

    def active_runs(self) -> list[TaskRun]:
        """Runs not yet completed: running, or ended with the terminal update unacknowledged."""
        return list(self._active.values())

    def running_tasks(self) -> list:
        from agora.v1 import agent_link_pb2

        return [
            agent_link_pb2.RunningTask(
                framework_id=r.record.framework_id, task=r.task, state=r.state
            )
            for r in self._active.values()
        ]

    # launching ----------------------------------------------------------------------------

    def run_task(
        self,
        framework_id: str,
        task: common_pb2.TaskInfo,
        user: str = "",
        framework_principal: str = "",
        framework_name: str = "",
    ) -> None:
        """Launches `task`; `user`: the Unix user to run it as (its command's or framework's);
        the framework's principal and name decide who may read its sandbox (file_access)."""
        key = (framework_id, task.task_id)
        if key in self._active:
            log.warning(
                "ignoring RunTask for a task that is already active on this agent",
                framework_id=framework_id,
                task_id=task.task_id,
            )
            return
        problem = bad_id_reason(framework_id, "framework id") or bad_id_reason(
            task.task_id, "task id"
        )
        try:
            argv = launcher.command_argv(task.command)
        except ValueError as e:
            problem = problem or str(e)
        task_user = None
        if problem is None:
            try:
                task_user = resolve_task_user(user)
            except TaskUserError as e:
                problem = str(e)
        if problem is not None:
            # Nothing was started: report the error without a run record.
            self._refuse(framework_id, task.task_id, problem)
            return
        record = TaskRecord(
            run_id=new_id("run"),
            framework_id=framework_id,
            task=b64(task.SerializeToString()),
            sandbox="",
            # The record's first write already says STARTING, the update that follows it.
            state=common_pb2.TASK_STARTING,
            launched_at=self._clock.time(),
            user=task_user.name if task_user is not None else "",
            framework_principal=framework_principal,
            framework_name=framework_name,
        )
        resources = _resources(task)
        try:
            record.gpus = self._gpus.take(record.run_id, resources.scalar("gpus"))
        except GpuError as e:
            self._refuse(framework_id, task.task_id, f"cannot start the task: {e}")
            return
        try:
            record.sandbox = str(self._work.new_sandbox(framework_id, task.task_id, task_user))
            # The cgroups go in the record's first write too: a restarted agent must find them
            # whatever happens from here on.
            lease = self._isolator.prepare(
                record.run_id,
                task_limits(resources, self._cpu_hard_limit, self._pids_max),
            )
            record.cgroups = lease.paths
            if lease.cpu_base is not None:
                record.cgroup_cpu_base = list(lease.cpu_base)
            # Everything the run will write later takes its room now: on a full disk the task
            # fails here, at once and saying why, rather than after it started.
            self._work.prepare_run(record)
        except OSError as e:
            self._isolator.cleanup(record.cgroups)
            self._gpus.release(record.run_id)
            self._work.discard_run(record)
            problem = (
                f"cannot start the task: the agent's disk is full ({self._work.root})"
                if e.errno == errno.ENOSPC
                else f"cannot start the task: the agent cannot write its work dir ({e})"
            )
            self._refuse(
                framework_id,
                task.task_id,
                problem,
                common_pb2.TASK_FAILED,
                "REASON_CONTAINER_LAUNCH_FAILED",
            )
            return
        sandbox = record.sandbox
        run = TaskRun(record=record, task=task, user=task_user)
        self._runs[record.run_id] = run
        self._active[key] = run
        log.info(
            "launching task",
            framework_id=framework_id,
            task_id=task.task_id,
            sandbox=sandbox,
            argv=argv,
        )
        # The record (prepare_run, which wrote it saying STARTING) reaches the OS before the
        # update is logged, so a restarted agent knows every task whose STARTING may have
        # left. It is not fsync'd: after a machine crash that lost it, the agent drops the
        # task's pending updates (AgentDaemon.start) and the master reports the task LOST
        # when the agent re-registers without it.
        self._report(run, common_pb2.TASK_STARTING, "launching the command")
        self._spawn(self._launch(run, argv), f"launch-{record.run_id}")

    async def _launch(self, run: TaskRun, argv: list[str]) -> None:
        run_dir = self._work.run_dir(run.record.run_id)
        env = launcher.task_environment(
            self._base_env,
            run.task,
            run.record.framework_id,
            self._agent_id(),
            run.sandbox,
            run.user,
        )
        if self._gpus.devices:  # a GPU agent: each task sees its own devices, or none
            env.update(visible_env(run.record.gpus))
        user = run.user
        wrapper_user = None if user is None else user.wrapper_user()
        if run.task.container.image:
            # From an image: the wrapper runs runc (as the agent: it makes namespaces and
            # mounts), the command runs inside as the task's user (agent/containers.py).
            if not run.record.cgroups:
                # The container's cgroup nests in the task's: without one, a kill of the
                # runtime would leave the container running.
                await self._empty_cgroups(run)
                self._end(
                    run,
                    common_pb2.TASK_FAILED,
                    "tasks from images need cgroups, which this agent cannot make",
                    "REASON_CONTAINER_LAUNCH_FAILED",
                )
                return
            if run.record.gpus:  # inside, its devices are the only ones: 0, 1, ...
                env.update(visible_env(str(i) for i in range(len(run.record.gpus))))
            try:
                argv, env = self._containers.wrap(
                    run_dir,
                    run.record.run_id,
                    run.task,
                    argv,
                    env,
                    run.sandbox,
                    user,
                    run.resources.scalar("disk"),
                    device_nodes(run.record.gpus),
                    rlimit_values(run.task.rlimits),
                )
            except (ContainerError, OSError) as e:
                await self._empty_cgroups(run)
                self._end(run, common_pb2.TASK_FAILED, str(e), "REASON_CONTAINER_LAUNCH_FAILED")
                return
            wrapper_user = None
        namespaces = ""
        if self._namespaces and not run.task.container.image:
            disk = run.resources.scalar("disk")
            tmp_bytes = int((disk if disk > 0 else DEFAULT_TMP_MB) * 1024 * 1024)
            namespaces = f"{tmp_bytes}:{self._work.sandboxes}"
        rlimits = task_rlimits(run.task.rlimits)
        spec = LaunchSpec.in_sandbox(
            argv,
            env,
            run.sandbox,
            run.record.cgroups,
            wrapper_user,
            namespaces,
            "" if run.task.container.image else rlimits,
        )
        try:
            run.wrapper = await self._launcher.launch(run_dir, spec)
        except launcher.LaunchError as e:
            await self._empty_cgroups(run)
            self._end(run, common_pb2.TASK_ERROR, str(e), "REASON_CONTAINER_LAUNCH_FAILED")
            return
        except OSError as e:
            await self._empty_cgroups(run)
            self._end(
                run,
                common_pb2.TASK_ERROR,
                f"cannot start the task wrapper: {e}",
                "REASON_CONTAINER_LAUNCH_FAILED",
            )
            return
        log.info(
            "task running",
            framework_id=run.record.framework_id,
            task_id=run.task.task_id,
            pid=run.wrapper.task_pid,
        )
        self._update(run, common_pb2.TASK_RUNNING, "the command is running")
        if self._metrics is not None:
            self._metrics.launch_seconds.observe(time.monotonic() - run.received)
        await self._watch(run)

    async def _watch(self, run: TaskRun) -> None:
        """Waits for the wrapper to end (killing it if asked) and reports the outcome."""
        assert run.wrapper is not None
        if run.record.killing:
            run.kill_requested.set()
        killer = self._spawn(self._kill_when_asked(run), f"kill-{run.record.run_id}")
        limit = run.task.max_completion_seconds
        deadline = None
        if limit > 0:
            # From its launch, on the wall clock of the record: an agent restarted meanwhile
            # re-arms it for what is left.
            left = run.record.launched_at + limit - self._clock.time()
            deadline = asyncio.get_running_loop().call_later(
                max(0.0, left),
                self.kill_for_limit,
                run,
                "REASON_MAX_COMPLETION_TIME_REACHED",
                f"ran past its time limit of {limit:g} s",
            )
        try:
            await run.wrapper.wait()
        finally:
            killer.cancel()
            if deadline is not None:
                deadline.cancel()
        result = launcher.read_exit(self._work.run_dir(run.record.run_id))
        if result is None:
            # The wrapper itself was killed: do not leave the command behind.
            run.wrapper.signal_group(signal.SIGKILL)
            await self._empty_cgroups(run)
        else:
            # The wrapper emptied them before it wrote its exit file: kept for the next task
            # if they are as good as new, else removed.
            self._isolator.release(run.record.cgroups)
            _drop_cgroups(run)
        self._end(run, *_outcome(run, result), usage=launcher.end_usage(result))

    async def _empty_cgroups(self, run: TaskRun) -> None:
        """After a failed launch or a killed wrapper: whatever did start (a wrapper can die
        between starting the command and reporting it) is killed, then the cgroups are
        removed."""
        cgroups = run.record.cgroups
        for _ in range(50):
            if not cgroup_members.kill(cgroups):
                break
            await asyncio.sleep(0.02)
        self._remove_cgroups(run)

    def _remove_cgroups(self, run: TaskRun) -> None:
        """Removes the run's cgroups (never kept for another task) and drops them from it."""
        self._isolator.cleanup(run.record.cgroups)
        _drop_cgroups(run)

    async def _kill_when_asked(self, run: TaskRun) -> None:
        await run.kill_requested.wait()
        assert run.wrapper is not None
        # Capped: whatever a task asked for, a kill ends within MAX_KILL_GRACE.
        grace = min(run.record.kill_grace or self._default_grace, MAX_KILL_GRACE)
        log.info(
            "killing task",
            framework_id=run.record.framework_id,
            task_id=run.task.task_id,
            pgid=run.wrapper.task_pid,
            grace=grace,
        )
        if not run.wrapper.signal_group(signal.SIGTERM):
            return
        await self._clock.sleep(grace)
        if run.wrapper.signal_group(signal.SIGKILL):
            log.info(
                "task outlived its grace period: sent SIGKILL",
                framework_id=run.record.framework_id,
                task_id=run.task.task_id,
            )
        # Processes that left the group (setsid) but not the task's cgroup die too.
        cgroup_members.kill(run.record.cgroups)

    # killing ----------------------------------------------------------------------------

    def kill_task(
        self, framework_id: str, task_id: str, grace: float = 0.0, why: list[str] | None = None
    ) -> None:
        """Kills a task, after its grace period (or `grace` when > 0). `why`: the master's
        [reason, message] for its TASK_KILLED status; None: the framework asked."""
        run = self._active.get((framework_id, task_id))
        if run is None:
            latest = self.find(framework_id, task_id)
            if latest is not None:
                log.info(
                    "kill of a task that already ended: ignored",
                    framework_id=framework_id,
                    task_id=task_id,
                )
                return
            log.info(
                "kill of an unknown task: reporting it lost",
                framework_id=framework_id,
                task_id=task_id,
            )
            self._emit(
                framework_id,
                self._status(
                    framework_id,
                    task_id,
                    common_pb2.TASK_LOST,
                    "the agent does not know this task",
                    "REASON_RECONCILIATION",
                ),
            )
            return
        if is_terminal(run.state) or run.record.killing:
            return
        run.record.killing = True
        run.record.kill_grace = grace if grace > 0 else run.task.kill_grace_period_seconds
        if why:
            run.record.kill_reason = list(why)
        self._work.save_record(run.record)
        # Before the wrapper is up, _watch picks up the flag as soon as it is.
        run.kill_requested.set()

    def kill_for_limit(self, run: TaskRun, reason: str, message: str) -> None:
        """Kills a task that exceeded a limit the agent enforces; it ends FAILED with `reason`."""
        if is_terminal(run.state) or run.record.killing:
            return
        log.warning(
            "task exceeded a limit: killing it",
            framework_id=run.record.framework_id,
            task_id=run.task.task_id,
            reason=reason,
            detail=message,
        )
        run.record.limitation = [reason, message]
        self.kill_task(run.record.framework_id, run.task.task_id)

    def shutdown_framework(self, framework_id: str) -> None:
        for run in list(self._active.values()):
            if run.record.framework_id == framework_id and not is_terminal(run.state):
                self.kill_task(framework_id, run.task.task_id)

    async def kill_all(self, timeout: float = 30.0, forget: bool = False) -> None:
        """Kills every task and waits for them to end.

        With `forget` (the agent was removed, its tasks are already LOST at the master) no
        further update is sent and the runs become history at once.
        """
        runs = list(self._active.values())
        for run in runs:
            run.forgotten = run.forgotten or forget
            if not is_terminal(run.state):
                self.kill_task(run.record.framework_id, run.task.task_id)
        waiting = [r.ended.wait() for r in runs if not is_terminal(r.state)]
        if waiting:
            try:
                await asyncio.wait_for(asyncio.gather(*waiting), timeout)
            except TimeoutError:
                log.warning("some tasks did not end in time", count=len(waiting))
        if forget:
            for run in runs:
                self.complete(run.record.framework_id, run.task.task_id)

    # state changes ----------------------------------------------------------------------

    def complete(self, framework_id: str, task_id: str) -> None:
        """The terminal update was acknowledged: the run is history now."""
        run = self._active.get((framework_id, task_id))
        if run is None or not (is_terminal(run.state) or run.forgotten):
            return
        del self._active[(framework_id, task_id)]
        run.record.completed = True
        self._completed.append(run.record.run_id)
        self._gc_queue.append((self._clock.time(), run.sandbox))
        # A terminal run needs no save: a restarted agent marks a terminal run with no pending
        # update completed (recover), which this one is now that its ack is logged.
        if run.forgotten:
            self._work.save_record(run.record, durable=False)
        self._trim_history()

    def _update(
        self,
        run: TaskRun,
        state: common_pb2.TaskState,
        message: str,
        reason: str = "",
        exit_code: int | None = None,
        durable: bool = False,
        usage: common_pb2.TaskEndUsage | None = None,
    ) -> None:
        # Later states need no fsync of the record: the update log (fsync'd) holds them, and
        # a machine crash that loses the record's state ends the run's wrapper too.
        run.record.state = state
        try:
            self._work.save_record(run.record, durable=durable)
        except OSError as e:
            # A full disk: the update log (which keeps a reserve) still holds the state, and a
            # restarted agent takes the log's word over the record's.
            log.error("cannot save the task's record", run_id=run.record.run_id, error=str(e))
        self._report(run, state, message, reason, exit_code, usage)

    def _report(
        self,
        run: TaskRun,
        state: common_pb2.TaskState,
        message: str,
        reason: str = "",
        exit_code: int | None = None,
        usage: common_pb2.TaskEndUsage | None = None,
    ) -> None:
        """Emits the update of `state`, which the run's record already holds."""
        if run.forgotten:
            return
        status = self._status(
            run.record.framework_id, run.task.task_id, state, message, reason, exit_code
        )
        if usage is not None:
            status.end_usage.CopyFrom(usage)
        self._emit(run.record.framework_id, status)

    def _end(
        self,
        run: TaskRun,
        state: common_pb2.TaskState,
        message: str,
        reason: str,
        exit_code: int | None = None,
        usage: common_pb2.TaskEndUsage | None = None,
    ) -> None:
        log.info(
            "task ended",
            framework_id=run.record.framework_id,
            task_id=run.task.task_id,
            state=common_pb2.TaskState.Name(state),
            message=message,
        )
        self._update(run, state, message, reason, exit_code, usage=usage)
        self._gpus.release(run.record.run_id)
        run.ended.set()
        if self._metrics is not None:
            self._metrics.task_ended(state)

    def _refuse(
        self,
        framework_id: str,
        task_id: str,
        problem: str,
        state: common_pb2.TaskState = common_pb2.TASK_ERROR,
        reason: str = "REASON_TASK_INVALID",
    ) -> None:
        """A task that does not start (no run record): the status that says why."""
        log.warning("refusing task", framework_id=framework_id, task_id=task_id, reason=problem)
        self._emit(framework_id, self._status(framework_id, task_id, state, problem, reason))

    def _status(
        self,
        framework_id: str,
        task_id: str,
        state: common_pb2.TaskState,
        message: str,
        reason: str = "",
        exit_code: int | None = None,
    ) -> common_pb2.TaskStatus:
        status = common_pb2.TaskStatus(
            task_id=task_id,
            state=state,
            message=message,
            reason=reason,
            source=common_pb2.TaskStatus.SOURCE_AGENT,
            agent_id=self._agent_id(),
            framework_id=framework_id,
            timestamp=self._clock.time(),
            uuid=new_uuid(),
        )
        if exit_code is not None:
            status.exit_code = exit_code
        return status

    # recovery ---------------------------------------------------------------------------

    def recover(self, pending: Callable[[str, str], list[common_pb2.TaskStatus]]) -> None:
        """Re-attaches to the runs of a previous agent; call after status updates recovered.

        `pending(framework_id, task_id)`: the task's updates still to be acknowledged.
        """
        # Watched again: the tasks that end from now on have their cgroups released here.
        self._work.unwatched.unlink(missing_ok=True)
        self._watching = True
        records = sorted(self._work.load_records(), key=lambda r: r.launched_at)
        for record in records:
            try:
                task = record.task_info()
            except Exception as e:  # noqa: BLE001 - a corrupt record must not stop the agent
                log.warning("skipping corrupt task record", run_id=record.run_id, error=str(e))
                continue
            run = TaskRun(record=record, task=task, user=_recorded_user(record))
            self._runs[record.run_id] = run
            if record.completed:
                self._completed.append(record.run_id)
                self._gc_queue.append((_mtime(run.sandbox), run.sandbox))
                continue
            queued = pending(record.framework_id, task.task_id)
            final = next((u for u in queued if is_terminal(u.state)), None)
            if final is not None and not is_terminal(record.state):
                # The terminal update reached the disk (the log is fsync'd) and the record's
                # last rewrite did not (it is not): a machine crash. The log is right, and no
                # second terminal update may follow the one the master may already have.
                record.state = final.state
                self._work.save_record(record, durable=False)
            if is_terminal(record.state) and not queued:
                # Acknowledged just before the last agent stopped.
                record.completed = True
                self._completed.append(record.run_id)
                self._gc_queue.append((_mtime(run.sandbox), run.sandbox))
                self._work.save_record(record)
                continue
            self._active[run.key] = run
            if is_terminal(record.state):
                continue
            self._gpus.hold(record.run_id, record.gpus)
            self._reattach(run)
        # What the last agent kept for its next tasks (or a crashed launch left) goes; the
        # live runs' cgroups are released as each one ends.
        self._isolator.sweep({path for run in self._active.values() for path in run.record.cgroups})
        self._gc_queue = deque(sorted(self._gc_queue, key=lambda entry: entry[0]))
        self._trim_history()

    def sandboxes_due(self, now: float, delay: float) -> list[Path]:
        """Sandboxes of runs completed at least `delay` seconds before `now` (taken off the
        queue); never the sandbox of a live run (a task id may be used again)."""
        due = []
        while self._gc_queue and self._gc_queue[0][0] + delay <= now:
            _, sandbox = self._gc_queue.popleft()
            due.append(sandbox)
        live = {run.sandbox for run in self._active.values()}
        return [path for path in due if path not in live]

    def _reattach(self, run: TaskRun) -> None:
        log_ = log.bind(framework_id=run.record.framework_id, task_id=run.task.task_id)
        run_dir = self._work.run_dir(run.record.run_id)
        run.wrapper = self._launcher.recover(run_dir)
        result = launcher.read_exit(run_dir)
        if run.wrapper is None:
            if result is not None:
                self._remove_cgroups(run)
                self._end(run, *_outcome(run, result), usage=launcher.end_usage(result))
            else:
                log_.warning("the agent stopped while launching this task")
                self._remove_cgroups(run)
                self._end(
                    run,
                    common_pb2.TASK_FAILED,
                    "the agent restarted while launching the task",
                    "REASON_AGENT_RESTARTED",
                )
            return
        # The command did start (the wrapper wrote its pid): say so if the last agent did not.
        if run.state != common_pb2.TASK_RUNNING:
            self._update(run, common_pb2.TASK_RUNNING, "the command is running")
        if run.wrapper.alive():
            log_.info("re-attached to a running task", pid=run.wrapper.task_pid)
        else:
            log_.info("task ended while the agent was down")
        # _watch returns at once for a wrapper that already ended and reads its exit file.
        self._spawn(self._watch(run), f"watch-{run.record.run_id}")

    def _trim_history(self) -> None:
        """Forgets the oldest completed runs beyond the bound (their sandboxes stay)."""
        while len(self._completed) > self._history:
            run_id = self._completed.popleft()
            self._runs.pop(run_id, None)
            self._work.remove_run(run_id)

    # plumbing ---------------------------------------------------------------------------

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)
        task.add_done_callback(_log_crash)
        return task

    async def stop(self) -> None:
        """Stops watching (the tasks themselves keep running, for the next agent)."""
        if self._watching:
            # Nobody releases the cgroups of the tasks that end from now on: their wrappers do
            # (after writing exit.json), and what ended before is released just below.
            try:
                self._work.unwatched.touch()
            except OSError as e:
                log.warning(
                    "cannot mark the tasks unwatched: the cgroups of those that end before the "
                    "next agent starts stay until it does",
                    error=str(e),
                )
            self._watching = False
        await cancel_and_wait(*self._bg)
        for run in self._active.values():
            if run.record.cgroups and run.wrapper is not None:
                if launcher.read_exit(self._work.run_dir(run.record.run_id)) is not None:
                    self._remove_cgroups(run)
        await self._launcher.stop()


def _drop_cgroups(run: TaskRun) -> None:
    """The run's cgroups are no longer its own (removed, or kept for the next task): its record,
    saved with its end, names none. A new list, so a usage read in flight sees the change."""
    run.record.cgroups, run.record.cgroup_cpu_base = [], []


def _resources(task: common_pb2.TaskInfo) -> Resources:
    try:
        return Resources.from_proto(task.resources)
    except ResourceError:
        return Resources()


def _mtime(path: Path) -> float:
    """When `path` last changed (a recovered completed run's sandbox); now if it is gone."""
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _log_crash(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "task manager background task failed", name=task.get_name(), exc_info=task.exception()
        )


def _recorded_user(record: TaskRecord) -> TaskUser | None:
    """The user a re-attached run was started as, for its health checks; None if now unknown."""
    try:
        return resolve_task_user(record.user)
    except TaskUserError:
        return None


def _outcome(run: TaskRun, result) -> tuple[common_pb2.TaskState, str, str, int | None]:
    """(state, message, reason, exit code) of a run that ended with `result` (its exit file),
    with the cause of a kill the agent or the master asked for."""
    state, message, reason, exit_code = launcher.exit_outcome(result, run.record.killing)
    if run.record.limitation and state == common_pb2.TASK_KILLED:
        # Killed by the agent for a limit it enforces: the task failed, and says why.
        state = common_pb2.TASK_FAILED
        reason, message = run.record.limitation
    elif run.record.kill_reason and state == common_pb2.TASK_KILLED:
        reason, message = run.record.kill_reason  # the master's, e.g. a drain's deadline
    return state, message, reason, exit_code


def rlimit_values(asked) -> dict[str, int]:
    """TaskInfo.rlimits, each at most the agent's own hard limit: a framework may lower them,
    not raise them (the agent, as root, could)."""
    import resource

    out = {}
    for name, value in sorted(asked.items()):
        which = getattr(resource, f"RLIMIT_{name.upper()}", None)
        if which is None:
            continue  # the master refuses unknown names; an old one is ignored
        hard = resource.getrlimit(which)[1]
        out[name] = value if hard == resource.RLIM_INFINITY else min(value, hard)
    return out


def task_rlimits(asked) -> str:
    """The wrappers' form of `rlimit_values`: "NAME:VALUE,..." ("" for none)."""
    return ",".join(f"{name}:{value}" for name, value in rlimit_values(asked).items())
