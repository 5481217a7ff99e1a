"""throughput: the three ways a user runs N tasks on Agora, and one task at a time.

- batch: the `agora job submit --instances N ... -- true` command against the `agora batch`
  daemon; the Batch API's own stamps say when each task was launched, seen RUNNING and seen
  ending (the daemon's wall clock; the runner's for the submit, same host);
- readme: the README's "Write your own framework" code as its own process
  (experiments/readme_framework.py), which notes the same three times itself;
- sdk: an SDK framework that holds the offers it cannot use yet and launches on them as tasks
  end (the experiments' load framework, in this process), timed as events are read.

Each returns one run: tasks/s over the whole run (submit -> the last task's end), launch ->
RUNNING and submit -> RUNNING per task, and a CPU account of the run (experiments/cpu_account.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agora.common.rpc import open_channel
from agora.common.task_states import TERMINAL_STATES
from agora.experiments.cpu_account import Component, CpuWindow
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.load import LoadConfig, Recorder, constant
from agora.experiments.processes import ProcessFailed, agora_argv
from agora.experiments.readme_framework import benchmark_script
from agora.experiments.results import Progress, summarize
from agora.experiments.throughput_cluster import Cluster, on_demand
from agora.v1 import batch_pb2, batch_pb2_grpc, common_pb2

# How often the runner asks how far a run has got (the Batch API's counts; the README
# framework's output; the SDK framework's counter).
POLL_SECONDS = 0.1
# Between two single tasks: the cluster is idle again when the next is submitted.
SINGLE_GAP = 0.05
JOB_ENDED = {batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED}


@dataclass(frozen=True)
class Workload:
    tasks: int
    cpus: float
    mem: float
    command: str
    timeout: float  # seconds a path may take before it is stopped and reported unfinished
    image: str = ""  # the batch path's tasks run from this image (--isolation image)


@dataclass(frozen=True)
class TaskRecord:
    """One task's steps, in seconds after the submit (None: not seen)."""

    launched: float | None
    running: float | None
    ended: float | None
    finished: bool  # ended TASK_FINISHED


def agora_command(*args: str) -> list[str]:
    """The `agora` command as a user runs it: the console script beside this Python."""
    script = Path(sys.executable).parent / "agora"
    return [str(script), *args] if script.exists() else agora_argv(*args)


def _ms(seconds: list[float]) -> list[float]:
    return [s * 1000.0 for s in seconds]


def path_result(
    path: str,
    label: str,
    workload: Workload,
    records: list[TaskRecord],
    account: dict,
    measured: dict[str, str],
    **extra,
) -> dict:
    """One path's run: what ran, how fast, how long each task took to start, what it cost."""
    ended = [r.ended for r in records if r.ended is not None]
    launched = [r.launched for r in records if r.launched is not None]
    last_end = max(ended) if ended else None
    first_launch = min(launched) if launched else None
    finished = sum(r.finished for r in records)
    span = last_end - first_launch if last_end is not None and first_launch is not None else None
    return {
        "system": "agora",
        "path": path,
        "label": label,
        "tasks": workload.tasks,
        "ended": len(ended),
        "finished": finished,
        "complete": finished == workload.tasks,
        "seconds": round(last_end, 3) if last_end is not None else None,
        "tasks_per_second": round(len(ended) / last_end, 2) if last_end else None,
        "first_launch_seconds": round(first_launch, 3) if first_launch is not None else None,
        "launch_span_tasks_per_second": round(len(ended) / span, 2) if span else None,
        "figures_ms": {
            "launch_to_running": summarize(
                _ms(
                    [
                        r.running - r.launched
                        for r in records
                        if r.running is not None and r.launched is not None
                    ]
                )
            ),
            "submit_to_running": summarize(
                _ms([r.running for r in records if r.running is not None])
            ),
        },
        "measured": measured,
        "cpu": account,
        "cpu_ms_per_task": cpu_per_task(account),
        **extra,
    }


# The long-lived daemons a cluster manager runs for its tasks (not the task wrappers or Slurm's
# slurmstepd, one per task; not the commands, the runner or the kernel).
DAEMON_KINDS = ("master", "agents", "launchers", "framework", "daemons")


def cpu_per_task(account: dict) -> dict[str, float | None]:
    """CPU ms per task of each component; "daemons", the long-lived daemons' sum; and
    "experiment", everything (the machine's busy time less the processes outside the run)."""
    components = account["components"]
    return {
        **{name: c["ms_per_task"] for name, c in components.items()},
        "daemons": round(
            sum(c["ms_per_task"] or 0.0 for c in components.values() if c["kind"] in DAEMON_KINDS),
            4,
        ),
        "experiment": account["experiment"]["ms_per_task"],
    }


def samples(run: dict, records: list[TaskRecord]) -> list[dict]:
    """samples.csv rows: one per task, its steps in seconds after the submit."""
    return [
        {
            "system": run["system"], "path": run["path"], "kind": "task", "n": n,
            "launched_s": r.launched, "running_s": r.running, "ended_s": r.ended,
            "finished": r.finished,
        }
        for n, r in enumerate(records)
    ]  # fmt: skip


async def run_command(argv: list[str], env: dict | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _window(cluster: Cluster, extra: list[Component]) -> CpuWindow:
    return CpuWindow([*cluster.components(), *extra])


# --- (a) the batch framework, through the `agora job submit` command --------------------------


def _submit_argv(master: str, workload: Workload, instances: int) -> list[str]:
    return agora_command(
        "job", "submit", "--master", master, "--instances", str(instances),
        "--cpus", f"{workload.cpus:g}", "--mem", f"{workload.mem:g}",
        *(["--image", workload.image] if workload.image else []), "--", workload.command,
    )  # fmt: skip


async def _submit_with_command(master: str, workload: Workload, instances: int) -> str:
    argv = _submit_argv(master, workload, instances)
    code, out, err = await run_command(argv)
    if code != 0 or not out.split():
        raise ProcessFailed(f"`{' '.join(argv)}` exited with code {code}: {err.strip()}")
    return out.split()[-1]  # it prints the job's id


async def _follow_job(stub, job_id: str, workload: Workload, started: float, progress: Progress):
    """Asks the Batch API for the job's counts (cheap: no instances) until it has ended."""
    deadline = time.monotonic() + workload.timeout
    while time.monotonic() < deadline:
        reply = await stub.ListJobs(batch_pb2.ListJobsRequest(), timeout=30)
        job = next((j for j in reply.jobs if j.job_id == job_id), None)
        if job is not None:
            done = job.counts.succeeded + job.counts.failed + job.counts.killed
            elapsed = time.time() - started
            progress.show(f"batch: {done}/{workload.tasks} tasks ended in {elapsed:.1f} s")
            if job.state in JOB_ENDED:
                return True
        await asyncio.sleep(POLL_SECONDS)
    await stub.KillJob(batch_pb2.KillJobRequest(job_id=job_id), timeout=30)
    return False


async def batch_path(cluster: Cluster, workload: Workload, progress: Progress) -> tuple[dict, list]:
    assert cluster.batch is not None
    me = os.getpid()
    window = _window(
        cluster,
        [
            Component("batch daemon", "framework", cluster.batch.pid, "`agora batch`"),
            Component(
                "agora job submit", "command", me,
                "the `agora job submit` command (its CPU as reaped by the runner)",
                reaped_children=True,
            ),
            Component(
                "runner", "runner", me,
                f"this process: asks the Batch API for the job's counts every {POLL_SECONDS:g} s",
            ),
        ],
    )  # fmt: skip
    async with open_channel(cluster.batch.address) as channel:
        stub = batch_pb2_grpc.BatchStub(channel)
        window.begin()
        submitted = time.time()
        job_id = await _submit_with_command(cluster.master.address, workload, workload.tasks)
        command_seconds = time.time() - submitted
        ended = await _follow_job(stub, job_id, workload, submitted, progress)
        window.end()
        job = await stub.GetJob(batch_pb2.GetJobRequest(job_id=job_id), timeout=30)
    records = []
    for instance in job.instances:
        if not instance.attempts:
            records.append(TaskRecord(None, None, None, False))
            continue
        a = instance.attempts[-1]
        records.append(
            TaskRecord(
                a.launched_at - submitted if a.launched_at else None,
                a.started_at - submitted if a.started_at else None,
                a.ended_at - submitted if a.ended_at else None,
                a.state == common_pb2.TASK_FINISHED,
            )
        )
    account = window.account(sum(r.ended is not None for r in records))
    run = path_result(
        "batch",
        "batch framework (`agora job submit`)",
        workload,
        records,
        account,
        {
            "submit": "the runner starts `agora job submit --instances N ...` (wall clock)",
            "launch": "the batch daemon records the task's launch, just before its Accept "
            "(Attempt.launched_at)",
            "running": "the batch daemon reads TASK_RUNNING (Attempt.started_at)",
            "end": "the batch daemon reads the task's terminal update (Attempt.ended_at)",
        },
        job_id=job_id,
        ended_in_time=ended,
        command_seconds=round(command_seconds, 3),
    )
    return run, samples(run, records)


# --- (b) the README's framework, as its own process ----------------------------------------------


def _readme_records(times: dict, submitted: float) -> list[TaskRecord]:
    def at(kind: str, task: str) -> float | None:
        value = times[kind].get(task)
        return None if value is None else value - submitted

    return [
        TaskRecord(
            at("launched", task), at("running", task), at("ended", task),
            times["state"].get(task) == "FINISHED",
        )
        for task in times["launched"]
    ]  # fmt: skip


async def readme_path(
    cluster: Cluster, workload: Workload, work: Path, logs: Path, progress: Progress
) -> tuple[dict, list]:
    script = work / "readme_framework.py"
    script.write_text(benchmark_script())
    times_path = work / "readme_times.json"
    output = logs / "readme-framework.log"
    me = os.getpid()
    window = _window(
        cluster,
        [
            Component(
                "README framework", "framework", me,
                "the README's framework, its own process (its CPU as reaped by the runner "
                "when it exits)",
                reaped_children=True,
            ),
            Component("runner", "runner", me, "this process: waits for the framework to exit"),
        ],
    )  # fmt: skip
    env = dict(
        os.environ,
        AGORA_MASTER=cluster.master.address,
        AGORA_BENCH_TASKS=str(workload.tasks),
        AGORA_BENCH_TIMES=str(times_path),
    )
    window.begin()
    submitted = time.time()
    with open(output, "wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            ended = await _wait_process(proc, workload, output, submitted, progress)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    window.end()
    if proc.returncode != 0 and ended:
        tail = "\n".join(output.read_text(errors="replace").splitlines()[-15:])
        raise ProcessFailed(f"the README framework exited with code {proc.returncode}:\n{tail}")
    times = json.loads(times_path.read_text()) if times_path.exists() else None
    records = _readme_records(times, submitted) if times else []
    records += [TaskRecord(None, None, None, False)] * (workload.tasks - len(records))
    account = window.account(sum(r.ended is not None for r in records))
    run = path_result(
        "readme",
        "README's framework (its own process)",
        workload,
        records,
        account,
        {
            "submit": "the runner starts the framework's process (wall clock)",
            "launch": "the framework calls driver.launch() for the task",
            "running": "its on_update() gets TASK_RUNNING",
            "end": "its on_update() gets the task's terminal update",
        },
        ended_in_time=ended,
        exit_code=proc.returncode,
    )
    return run, samples(run, records)


async def _wait_process(proc, workload: Workload, output: Path, submitted: float, progress):
    """Until the README framework exits (True), or the timeout (SIGINT, then False)."""
    deadline = time.monotonic() + workload.timeout
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(proc.wait(), 2.0)
            return True
        except TimeoutError:
            done = output.read_bytes().count(b": FINISHED")
            elapsed = time.time() - submitted
            progress.show(f"readme: {done}/{workload.tasks} tasks finished in {elapsed:.1f} s")
    proc.send_signal(signal.SIGINT)  # it writes what it did so far as it stops
    try:
        await asyncio.wait_for(proc.wait(), 15.0)
    except TimeoutError:
        pass
    return False


# --- (c) an SDK framework that holds the offers it cannot use yet -------------------------------


class TaskRecorder(Recorder):
    """The load frameworks' Recorder, also keeping each task's launch, RUNNING and end."""

    def __init__(self) -> None:
        super().__init__()
        self.launched: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ended: dict[str, tuple[float, int]] = {}

    def accepted(self, task_ids) -> None:
        task_ids = list(task_ids)
        now = self.clock()
        for task_id in task_ids:
            self.launched.setdefault(task_id, now)
        super().accepted(task_ids)

    def update(self, framework: str, status: common_pb2.TaskStatus) -> None:
        now = self.clock()
        if status.state == common_pb2.TASK_RUNNING:
            self.running.setdefault(status.task_id, now)
        elif status.state in TERMINAL_STATES and status.uuid:
            self.ended.setdefault(status.task_id, (now, status.state))
        super().update(framework, status)


async def sdk_path(cluster: Cluster, workload: Workload, progress: Progress) -> tuple[dict, list]:
    recorder = TaskRecorder()
    load = LoadConfig(
        name="throughput-sdk",
        cpus=workload.cpus,
        mem=workload.mem,
        duration=constant(0.0),
        max_tasks=workload.tasks,
        hold_offers=True,
        max_held=10**9,
        leftover_refuse_seconds=0.0,
        command="true",
    )
    frameworks = FrameworkSet(cluster.master.address, [load], recorder)
    framework = frameworks.frameworks[0]
    window = _window(
        cluster,
        [
            Component(
                "SDK framework (runner)", "framework", os.getpid(),
                "this process: the offer-holding SDK framework (and the wait for it)",
            )
        ],
    )  # fmt: skip
    window.begin()
    submitted = time.monotonic()
    frameworks.start()
    try:
        ended = await _wait_for(
            lambda: framework.ended >= workload.tasks, workload, submitted, "sdk",
            lambda: framework.ended, progress,
        )  # fmt: skip
        window.end()
    finally:
        await frameworks.stop(teardown=True)
    records = []
    for task_id, launched in recorder.launched.items():
        running = recorder.running.get(task_id)
        end = recorder.ended.get(task_id)
        records.append(
            TaskRecord(
                launched - submitted,
                None if running is None else running - submitted,
                None if end is None else end[0] - submitted,
                end is not None and end[1] == common_pb2.TASK_FINISHED,
            )
        )
    records += [TaskRecord(None, None, None, False)] * (workload.tasks - len(records))
    account = window.account(sum(r.ended is not None for r in records))
    run = path_result(
        "sdk",
        "SDK framework holding offers (in the runner)",
        workload,
        records,
        account,
        {
            "submit": "the framework starts subscribing (monotonic clock)",
            "launch": "the framework issues Accept (LAUNCH) for the task",
            "running": "TASK_RUNNING is read off the framework's event stream",
            "end": "the task's terminal update is read off the stream",
        },
        ended_in_time=ended,
    )
    return run, samples(run, records)


async def _wait_for(
    done: Callable[[], bool],
    workload: Workload,
    started: float,
    name: str,
    count: Callable[[], int],
    progress: Progress,
) -> bool:
    deadline = started + workload.timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        progress.show(
            f"{name}: {count()}/{workload.tasks} tasks ended in {time.monotonic() - started:.1f} s"
        )
        await asyncio.sleep(POLL_SECONDS)
    return True


# --- one task at a time, on an idle cluster --------------------------------------------------


def single_result(label: str, rows: list[dict], measured: str) -> dict:
    return {
        "label": label,
        "count": len(rows),
        "finished": sum(r["finished"] for r in rows),
        "submit_to_start": summarize(r["submit_to_start_ms"] for r in rows),
        # Parts only some ways can time (not Slurm's): left out where a row lacks them.
        "submit_to_launch": summarize(
            r["submit_to_launch_ms"] for r in rows if "submit_to_launch_ms" in r
        ),
        "launch_to_start": summarize(
            r["launch_to_start_ms"] for r in rows if "launch_to_start_ms" in r
        ),
        "measured": measured,
    }


def _single_spec(workload: Workload) -> batch_pb2.JobSpec:
    return batch_pb2.JobSpec(
        name="single",
        instances=1,
        task=batch_pb2.TaskTemplate(
            command=common_pb2.CommandInfo(shell=workload.command),
            cpus=workload.cpus,
            mem=workload.mem,
        ),
    )


async def _watch_to_end(stub, job_id: str) -> batch_pb2.Attempt:
    """Follows the job (WatchJob, as `agora job submit --wait` does) until it has ended."""
    async for _ in stub.WatchJob(batch_pb2.WatchJobRequest(job_id=job_id), timeout=60):
        pass
    job = await stub.GetJob(batch_pb2.GetJobRequest(job_id=job_id), timeout=30)
    return job.instances[0].attempts[-1]


def _batch_row(kind: str, n: int, submitted: float, attempt: batch_pb2.Attempt) -> dict:
    return {
        "system": "agora", "path": kind, "kind": "single", "n": n,
        "submit_to_start_ms": (attempt.started_at - submitted) * 1000,
        "submit_to_launch_ms": (attempt.launched_at - submitted) * 1000,
        "launch_to_start_ms": (attempt.started_at - attempt.launched_at) * 1000,
        "finished": attempt.state == common_pb2.TASK_FINISHED,
    }  # fmt: skip


async def batch_singles(
    cluster: Cluster, workload: Workload, count: int, progress: Progress
) -> tuple[dict, dict, list]:
    """`count` single-instance jobs through the Batch API (SubmitJob), then as many through
    the `agora job submit` command, one at a time (each after the last has ended), after one
    of each as a warm-up."""
    assert cluster.batch is not None
    spec = _single_spec(workload)
    rows: dict[str, list[dict]] = {"batch_api": [], "command": []}
    async with open_channel(cluster.batch.address) as channel:
        stub = batch_pb2_grpc.BatchStub(channel)
        for n in range(count + 1):
            progress.show(f"single tasks through the Batch API: {n}/{count}")
            submitted = time.time()
            reply = await stub.SubmitJob(batch_pb2.SubmitJobRequest(spec=spec), timeout=30)
            attempt = await _watch_to_end(stub, reply.job_id)
            if n:  # the first is the warm-up
                rows["batch_api"].append(_batch_row("batch_api", n, submitted, attempt))
            await asyncio.sleep(SINGLE_GAP)
        for n in range(count + 1):
            progress.show(f"single tasks through `agora job submit`: {n}/{count}")
            submitted = time.time()
            job_id = await _submit_with_command(cluster.master.address, workload, 1)
            attempt = await _watch_to_end(stub, job_id)
            if n:
                rows["command"].append(_batch_row("command", n, submitted, attempt))
            await asyncio.sleep(SINGLE_GAP)
    api = single_result(
        "Batch API (SubmitJob)",
        rows["batch_api"],
        "SubmitJob called (the runner's wall clock) -> the batch daemon reads TASK_RUNNING "
        "(Attempt.started_at)",
    )
    command = single_result(
        "`agora job submit` (the command)",
        rows["command"],
        "the runner starts `agora job submit --instances 1 ...` -> the batch daemon reads "
        "TASK_RUNNING (Attempt.started_at); the command's own start-up included",
    )
    return api, command, rows["batch_api"] + rows["command"]


async def sdk_singles(
    cluster: Cluster, workload: Workload, count: int, progress: Progress
) -> tuple[dict, list]:
    """`count` tasks one at a time through an SDK framework at rest (suppressed, holding
    nothing): each submit revives it, and it launches on the first offer that comes."""
    rows = []
    async with on_demand(cluster.master.address, workload.cpus, workload.mem) as framework:
        for n in range(count + 1):
            progress.show(f"single tasks through the SDK: {n}/{count}")
            (times,) = await framework.run_tasks(1)
            if n and times.running is not None and times.launched is not None:
                rows.append({
                    "system": "agora", "path": "sdk", "kind": "single", "n": n,
                    "submit_to_start_ms": (times.running - times.submitted) * 1000,
                    "submit_to_launch_ms": (times.launched - times.submitted) * 1000,
                    "launch_to_start_ms": (times.running - times.launched) * 1000,
                    "finished": times.state == common_pb2.TASK_FINISHED,
                })  # fmt: skip
            await asyncio.sleep(SINGLE_GAP)
    result = single_result(
        "SDK framework at rest (revive -> offer -> launch)",
        rows,
        "the framework is given the task and revives -> its on_update() gets TASK_RUNNING "
        "(monotonic clock, in the runner)",
    )
    return result, rows


async def warm_up(cluster: Cluster, workload: Workload) -> None:
    """One task on each agent before a phase measures (its first launch makes cgroups etc.)."""
    async with on_demand(cluster.master.address, workload.cpus, workload.mem) as framework:
        await framework.run_tasks(len(cluster.agents))
