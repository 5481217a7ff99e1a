"""`agora bench tasks`: what an agent's own work costs per task, without the network.

A real TaskManager and StatusUpdateManager (agora.agent) on a fresh work dir launch `true`
through the agent's task wrapper, as the agent does, `concurrency` at a time; a stand-in for
the master acknowledges every status update on the next turn of the loop, so each task goes
through STARTING, RUNNING and FINISHED, their log lines and acknowledgements, and its run is
completed (and trimmed from the history) as on an agent. The process's own CPU over the run,
divided by the tasks, is the agent's per-task cost without gRPC; the children's CPU is that of
each task's wrapper and command. Compare `agora experiment launch --real-agents`, where the
same work also crosses the master and a framework.
"""

from __future__ import annotations

import asyncio
import resource
import shutil
import tempfile
import time
from pathlib import Path

from agora.agent.checkpoint import WorkDir
from agora.agent.isolation import Isolator, owner_name
from agora.agent.status_updates import StatusUpdateManager
from agora.agent.task_manager import TaskManager
from agora.common.task_states import is_terminal
from agora.v1 import common_pb2

FRAMEWORK = "bench-framework"


class BenchError(RuntimeError):
    """The benchmark could not run; the message says why."""


# A run in which no task finished for this long has stalled (a task normally takes milliseconds).
STALL_SECONDS = 30.0


async def _wait_while_finishing(done: asyncio.Event, counts: dict[str, int]) -> None:
    """Waits for `done`; BenchError if tasks stop finishing for STALL_SECONDS."""
    seen = -1
    while not done.is_set():
        if counts["finished"] == seen:
            raise BenchError(
                f"no task finished in {STALL_SECONDS:g} s ({seen} of {counts['launched']} "
                "launched did): the agent's task path is stuck"
            )
        seen = counts["finished"]
        try:
            await asyncio.wait_for(done.wait(), STALL_SECONDS)
        except TimeoutError:
            pass


def run_tasks_bench(
    tasks: int, concurrency: int, work_dir: str | None = None, cgroups: bool = True
) -> dict:
    """Runs `tasks` tasks, `concurrency` at a time; returns the CPU figures per task."""
    try:
        root = Path(tempfile.mkdtemp(prefix="agora-bench-tasks-", dir=work_dir))
    except OSError as e:
        where = work_dir or tempfile.gettempdir()
        raise BenchError(f"cannot make a work dir under {where}: {e}") from None
    try:
        return asyncio.run(_run(root, tasks, concurrency, cgroups))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _run(root: Path, tasks: int, concurrency: int, cgroups: bool) -> dict:
    loop = asyncio.get_running_loop()
    work = WorkDir(root)
    done = asyncio.Event()
    counts = {"launched": 0, "finished": 0, "failed": 0}

    def send(framework_id: str, status: common_pb2.TaskStatus) -> bool:
        loop.call_soon(acknowledge, framework_id, status)  # the master and framework
        return True

    def acknowledge(framework_id: str, status: common_pb2.TaskStatus) -> None:
        acked = updates.ack(framework_id, status.task_id, status.uuid)
        if acked is None or not is_terminal(acked.state):
            return
        manager.complete(framework_id, status.task_id)
        counts["finished"] += 1
        if acked.state != common_pb2.TASK_FINISHED:
            counts["failed"] += 1
        if counts["launched"] < tasks:
            launch()
        elif counts["finished"] >= tasks:
            done.set()

    def launch() -> None:
        counts["launched"] += 1
        task = common_pb2.TaskInfo(task_id=f"t{counts['launched']}", name="bench")
        task.command.shell = "true"
        for name, value in (("cpus", 0.1), ("mem", 16.0)):
            task.resources.add(name=name, scalar=value)
        manager.run_task(FRAMEWORK, task)

    updates = StatusUpdateManager(work.updates_log, send)
    updates.recover()
    isolator = Isolator(enabled=cgroups, owner=owner_name(work.root))
    manager = TaskManager(work, updates.update, lambda: "bench-agent", isolator=isolator)
    manager.recover(updates.pending)
    updates.start()
    await manager.start_launcher()
    spawned_here = manager.spawns_wrappers
    try:
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        for _ in range(min(concurrency, tasks)):
            launch()
        await _wait_while_finishing(done, counts)
        elapsed = time.perf_counter() - started
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        await manager.stop()
        isolator.close()
        await updates.stop()
    if counts["failed"]:
        raise BenchError(f"{counts['failed']} of {tasks} tasks did not finish (exit code 0)")

    def per_task(after, before) -> dict[str, float]:
        user = (after.ru_utime - before.ru_utime) * 1000 / tasks
        system = (after.ru_stime - before.ru_stime) * 1000 / tasks
        return {
            "ms": round(user + system, 3),
            "user_ms": round(user, 3),
            "system_ms": round(system, 3),
        }

    return {
        "tasks": tasks,
        "concurrency": concurrency,
        "isolation": isolator.kind,
        "work_dir": str(root.parent),
        "seconds": round(elapsed, 3),
        "tasks_per_second": round(tasks / elapsed, 1),
        "agent_cpu_per_task": per_task(own, own_before),
        # Only where the agent spawns the wrappers: the launcher's children are not ours.
        "wrapper_and_task_cpu_per_task": (
            per_task(children, children_before) if spawned_here else None
        ),
    }
