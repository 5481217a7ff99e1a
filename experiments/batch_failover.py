"""agora experiment failover --component batch: kill the leading `agora batch --zk` daemon with
SIGKILL during a large job, over and over, and measure how long until clients and the job go on.

A real ZooKeeper (Debian's package), one master, real agents running real processes, and
`--members` batch daemons in a set on ZooKeeper (`agora batch --zk`). One job of `--instances`
short instances is submitted through the Batch API; each instance leaves a marker file named
after its index and task id, so an instance that ran twice shows as two markers and one lost as
none. The leader is killed `--kills` times while the job runs, each time restarted at once (as
a supervisor would) to stand by. Per kill (times from the SIGKILL):

- elected: ZooKeeper names another member (the election watch, in this process);
- client back: a client that finds the Batch API through the master, as `agora job` does,
  gets the job (polled every 20 ms; the target: p50 <= 2 s);
- launches back: the job shows more instances launched than it did just before the kill (seen
  through the same client, so never before "client back"; the old leader may have launched a
  few in the milliseconds between that look and the kill).

At the end: every instance must have succeeded exactly once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc

from agora.common.election import zk_client
from agora.common.rpc import open_channel
from agora.experiments.failover import await_leader
from agora.experiments.processes import (
    Daemon,
    agora_argv,
    free_ports,
    scratch_dir,
    start_real_agent,
)
from agora.experiments.results import Progress, Results, stats_table, summarize, targets_md
from agora.frameworks.batch.client import BatchNotFound, find_batch_address
from agora.v1 import batch_pb2, batch_pb2_grpc

METRICS = ("elected", "client_back", "launches_back")


@dataclass
class BatchFailoverConfig:
    kills: int = 5
    members: int = 2
    agents: int = 2
    instances: int = 1000
    task_seconds: float = 0.2
    session_timeout: float = 1.5


async def run(
    cfg: BatchFailoverConfig, out: Path, command: list[str], quiet: bool = False
) -> Results:
    from agora.common.zookeeper_server import ZooKeeperServer

    progress = Progress("failover", quiet)
    params = {**cfg.__dict__, "component": "batch"}
    results = Results("failover", out, params, command)
    scratch = scratch_dir("agora-batch-failover-")
    logs, markers = scratch / "logs", scratch / "markers"
    markers.mkdir(parents=True)
    zk = await asyncio.to_thread(ZooKeeperServer(scratch / "zookeeper").start)
    path = f"/agora-batch-failover-{int(time.time())}"
    url = f"zk://{zk.address}{path}"
    watcher = zk_client(zk.address, 10.0)
    await asyncio.to_thread(watcher.start, 10)
    master_port, *ports = free_ports(1 + cfg.members)
    master = await Daemon(
        "master",
        agora_argv(
            "master",
            "--port",
            str(master_port),
            "--state-dir",
            str(scratch / "master"),
            "--log-level",
            "info",
        ),
        logs,
    ).start()

    def member(i: int) -> Daemon:
        argv = agora_argv(
            "batch",
            "--master",
            master.address,
            "--zk",
            url,
            "--zk-session-timeout",
            str(cfg.session_timeout),
            "--port",
            str(ports[i]),
            "--state-dir",
            str(scratch / f"batch-{i}"),
            "--log-level",
            os.environ.get("AGORA_BATCH_LOG_LEVEL", "info"),
        )
        return Daemon(f"batch-{i}", argv, logs)

    members = [await member(i).start() for i in range(cfg.members)]
    agents = []
    samples: list[dict] = []
    try:
        for i in range(cfg.agents):
            agents.append(
                await start_real_agent(
                    master.address,
                    logs,
                    scratch / f"agent-{i}",
                    "cpus:4;mem:8192;disk:4096",
                    f"agent-{i}",
                )
            )
        leader = await await_leader(watcher, path, exclude="")
        script = f"touch {markers}/$AGORA_INSTANCE.$AGORA_TASK_ID; sleep {cfg.task_seconds:g}"
        spec = batch_pb2.JobSpec(name="failover", instances=cfg.instances, max_retries=3)
        spec.task.command.shell = script
        spec.task.cpus, spec.task.mem = 0.1, 32
        request = batch_pb2.SubmitJobRequest(spec=spec)
        job_id = (await _call(master.address, "SubmitJob", request)).job_id
        started = time.time()
        for kill in range(1, cfg.kills + 1):
            # Kills spread over the job: the next once that share of its instances started.
            share = kill / (cfg.kills + 1)
            while len(os.listdir(markers)) < share * cfg.instances:
                await asyncio.sleep(0.02)
            progress.show(f"kill {kill}/{cfg.kills}", force=True)
            index = [m.address for m in members].index(leader)
            before = await _call(master.address, "GetJob", batch_pb2.GetJobRequest(job_id=job_id))
            killed_at = time.time()
            proc = members[index].proc
            assert proc is not None
            proc.kill()
            await proc.wait()
            await members[index].stop()
            client = asyncio.create_task(_await_client(master.address, job_id))
            launch = asyncio.create_task(_await_launch(master.address, job_id, _launched(before)))
            new_leader = await await_leader(watcher, path, exclude=leader)
            elected = time.time()
            client_back, launches_back = await client, await launch
            members[index] = await member(index).start()  # stands by again
            samples.append(
                {
                    "kill": kill,
                    "elected": round(elected - killed_at, 3),
                    "client_back": round(client_back - killed_at, 3),
                    "launches_back": round(launches_back - killed_at, 3),
                }
            )
            progress.show(
                f"kill {kill}: elected {samples[-1]['elected']} s, client back "
                f"{samples[-1]['client_back']} s, launches back {samples[-1]['launches_back']} s",
                force=True,
            )
            leader = new_leader
        job = await _await_done(master.address, job_id, timeout=60 + cfg.instances)
        finished = time.time()
    finally:
        for d in [*members, *agents]:
            await d.stop()
        await master.stop()
        watcher.stop()
        watcher.close()
        await asyncio.to_thread(zk.stop)

    runs = Counter(name.split(".", 1)[0] for name in os.listdir(markers))
    lost = [i for i in range(cfg.instances) if runs.get(str(i), 0) == 0]
    twice = sorted(int(i) for i, n in runs.items() if n > 1)
    stats = {m: summarize([s[m] for s in samples]) for m in METRICS}
    run_entry = {
        "kills": len(samples),
        "seconds": stats,
        "instances": cfg.instances,
        "succeeded": job.counts.succeeded,
        "failed": job.counts.failed,
        "instances_lost": len(lost),
        "instances_run_twice": len(twice),
        "run_twice": twice[:20],
        "job_seconds": round(finished - started, 2),
    }
    results.add_run(run_entry)
    results.add_samples(samples)
    results.target(
        "kill -> client back p50", stats["client_back"]["p50"], 2.0, "s", measured_in="client_back"
    )
    results.target(
        "kill -> launches back p50",
        stats["launches_back"]["p50"],
        2.0,
        "s",
        measured_in="launches_back",
    )
    results.target("instances lost", float(len(lost)), 0, "instances")
    results.target("instances run twice", float(len(twice)), 0, "instances")
    summary = "\n".join(
        [
            "# failover --component batch: SIGKILL of the leading batch daemon",
            "",
            f"{cfg.members} `agora batch --zk` daemons on a real ZooKeeper (session timeout "
            f"{cfg.session_timeout:g} s), one master, {cfg.agents} real agents; one job of "
            f"{cfg.instances} instances of {cfg.task_seconds:g} s, the leader killed "
            f"{len(samples)} times during it and restarted at once to stand by.",
            "",
            stats_table([(m.replace("_", " "), stats[m]) for m in METRICS], unit="s"),
            "",
            f"Instances succeeded {job.counts.succeeded} of {cfg.instances}, lost {len(lost)}, "
            f"run twice {len(twice)}; the job took {run_entry['job_seconds']} s.",
            "",
            targets_md(results.data["targets"]),
            "",
        ]
    )
    results.write(summary, [])
    if not os.environ.get("AGORA_KEEP_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)
    progress.done(
        f"client back after a kill: p50 {stats['client_back']['p50']} s; lost {len(lost)}, "
        f"run twice {len(twice)}"
    )
    return results


async def _call(master: str, method: str, request, timeout: float = 5.0):
    """One Batch call where the master says the API is (as `agora job` finds it)."""
    address = await asyncio.to_thread(find_batch_address, master, timeout=timeout)
    channel = open_channel(address)
    try:
        return await getattr(batch_pb2_grpc.BatchStub(channel), method)(request, timeout=timeout)
    finally:
        await channel.close()


def _launched(job: batch_pb2.Job) -> int:
    return job.spec.instances - job.counts.pending


async def _await_client(master: str, job_id: str, timeout: float = 60) -> float:
    """When a client finding the API through the master first gets the job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await _call(master, "GetJob", batch_pb2.GetJobRequest(job_id=job_id), 1.0)
            return time.time()
        except (grpc.aio.AioRpcError, BatchNotFound):
            await asyncio.sleep(0.02)
    raise TimeoutError(f"no client got the job within {timeout:g} s")


async def _await_launch(master: str, job_id: str, launched: int, timeout: float = 60) -> float:
    """When the job shows more launched instances than `launched` (the new leader launched),
    or it has none left to launch."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            job = await _call(master, "GetJob", batch_pb2.GetJobRequest(job_id=job_id), 1.0)
            if _launched(job) > launched or not job.counts.pending:
                return time.time()
        except (grpc.aio.AioRpcError, BatchNotFound):
            pass
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no instance launched within {timeout:g} s of the failover")


async def _await_done(master: str, job_id: str, timeout: float) -> batch_pb2.Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            job = await _call(master, "GetJob", batch_pb2.GetJobRequest(job_id=job_id))
            if job.state in (batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED):
                return job
        except (grpc.aio.AioRpcError, BatchNotFound):
            pass
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the job did not end within {timeout:g} s")
