"""A whole cluster in the test's event loop for the batch framework's tests: a real master,
real agents running real processes, and the batch daemon, all over gRPC on loopback.

`agora job ...` runs as a process of its own, awaited from a worker thread so that the daemons
in this event loop keep serving it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT, eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.frameworks.batch import BatchConfig, BatchDaemon
from agora.master import Master, MasterConfig
from agora.v1 import batch_pb2, batch_pb2_grpc, common_pb2

FAST_MASTER = dict(
    heartbeat_interval_seconds=0.2, agent_timeout_seconds=3.0, allocation_interval_seconds=0.5
)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@dataclass
class BatchCluster:
    root: Path
    agent_resources: list[str] = field(
        default_factory=lambda: [
            "cpus:2;mem:1024;disk:1024;ports:[31000-31099]",
            "cpus:2;mem:1024;disk:1024;ports:[32000-32099]",
        ]
    )
    agent_attributes: list[dict[str, str]] = field(default_factory=list)  # by agent, if given
    batch_overrides: dict = field(default_factory=dict)
    master_overrides: dict = field(default_factory=dict)
    in_process_batch: bool = True  # False: the test runs `agora batch` itself
    master: Master | None = None
    agents: list[AgentDaemon] = field(default_factory=list)
    batch: BatchDaemon | None = None
    _channel: object = None

    async def start(self) -> BatchCluster:
        self.master = Master(
            MasterConfig(
                host="127.0.0.1",
                port=0,
                state_dir=self.root / "master",
                **{**FAST_MASTER, **self.master_overrides},
            )
        )
        await self.master.start()
        for i, resources in enumerate(self.agent_resources):
            agent = AgentDaemon(
                AgentConfig(
                    master=self.master.address,
                    host="127.0.0.1",
                    port=0,
                    resources=Resources.parse(resources),
                    work_dir=self.root / f"agent-{i}",
                    hostname=f"host-{i}",
                    attributes=self.agent_attributes[i] if self.agent_attributes else {},
                    reconnect_backoff_initial_seconds=0.05,
                    reconnect_backoff_max_seconds=0.5,
                    update_backoff_initial_seconds=0.2,
                    update_backoff_max_seconds=1.0,
                )
            )
            await agent.start()
            self.agents.append(agent)
        core = self.master.core
        await eventually_async(
            lambda: sum(1 for a in core.reg.agents.values() if a.connected) == len(self.agents),
            timeout=20,
            message="agents registered",
        )
        if self.in_process_batch:
            await self.start_batch()
        return self

    def batch_config(self) -> BatchConfig:
        values = dict(
            master=self.master.address,
            host="127.0.0.1",
            port=0,
            state_dir=self.root / "batch",
            retry_backoff_seconds=0.05,
            retry_backoff_max_seconds=0.2,
            decline_refuse_seconds=0.2,
            unfit_refuse_seconds=0.2,
        )
        values.update(self.batch_overrides)
        return BatchConfig(**values)

    async def start_batch(self) -> BatchDaemon:
        self.batch = BatchDaemon(self.batch_config())
        await self.batch.start()
        await eventually_async(
            lambda: self.batch.driver and self.batch.driver.connected,
            timeout=20,
            message="batch framework subscribed",
        )
        if self._channel is not None:
            await self._channel.close()
        self._channel = insecure_channel(self.batch.address)
        return self.batch

    async def stop_batch(self) -> None:
        if self.batch is not None:
            await self.batch.stop()
            self.batch = None

    @property
    def stub(self) -> batch_pb2_grpc.BatchStub:
        return batch_pb2_grpc.BatchStub(self._channel)

    async def stop(self) -> None:
        await self.stop_batch()
        if self._channel is not None:
            await self._channel.close()
        for agent in self.agents:
            await agent.stop(kill_tasks=True)
        if self.master is not None:
            await self.master.stop()

    async def submit(
        self,
        command: str | list[str],
        instances: int = 1,
        cpus: float = 0.1,
        mem: float = 16,
        **spec,
    ) -> str:
        info = (
            common_pb2.CommandInfo(shell=command)
            if isinstance(command, str)
            else common_pb2.CommandInfo(argv=command)
        )
        request = batch_pb2.SubmitJobRequest(
            spec=batch_pb2.JobSpec(
                name=spec.pop("name", "test"),
                instances=instances,
                task=batch_pb2.TaskTemplate(command=info, cpus=cpus, mem=mem),
                **spec,
            )
        )
        reply = await self.stub.SubmitJob(request)
        return reply.job_id

    async def job(self, job_id: str) -> batch_pb2.Job:
        return await self.stub.GetJob(batch_pb2.GetJobRequest(job_id=job_id))

    async def wait_state(self, job_id: str, state: int, timeout: float = 60.0) -> batch_pb2.Job:
        async def check():
            job = await self.job(job_id)
            return job if job.state == state else None

        name = batch_pb2.JobState.Name(state)
        return await eventually_async(check, timeout=timeout, message=f"{job_id} {name}")

    async def cli(self, *args: str) -> CliResult:
        """`agora ARGS` in a thread, with this cluster's master; stdout/stderr captured."""
        return await asyncio.to_thread(run_cli, "--master", self.master.address, *args)


def run_cli(*args: str) -> CliResult:
    """Runs `agora ARGS` as a process; `--master X` first is moved after `job ACTION`."""
    argv = list(args)
    if argv[:1] == ["--master"]:
        master = argv[1:2]
        rest = argv[2:]
        head = rest[:2] if rest[:1] == ["job"] else rest[:1]
        argv = [*head, "--master", *master, *rest[len(head) :]]
    result = subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    return CliResult(result.returncode, result.stdout, result.stderr)
