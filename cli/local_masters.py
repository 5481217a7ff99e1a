"""`agora local --masters N`: a ZooKeeper server, N `agora master --zk` processes, and the batch
and services frameworks as highly available pairs (`agora batch --zk`, `agora services --zk`).

They run as processes of their own (not in `agora local`'s), so that one can be killed with
`kill -9` to watch another take over. `agora local` supervises them as an init system would: a
daemon that exits is started again a second later and stands by.

Ports: the masters on --port, --port+1, ...; the batch pair on --port+10 and +11, the services
pair on --port+12 and +13 (the dashboards are from --port+30).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from agora.common.zookeeper_server import ZooKeeperServer

__all__ = ["FRAMEWORK_PORTS", "LocalMasters"]

# Offsets from --port of the framework pairs' members.
FRAMEWORK_PORTS = {"batch": (10, 11), "services": (12, 13)}


@dataclass
class LocalMasters:
    """ZooKeeper under `work_dir/zookeeper` and masters on ports port, port+1, ..."""

    work_dir: Path
    count: int
    host: str
    port: int
    http_port: int | None
    extra_args: list[str] = field(default_factory=list)  # TLS flags, --insecure, logging
    session_timeout: float = 1.5
    zookeeper: ZooKeeperServer | None = None
    processes: list[subprocess.Popen | None] = field(default_factory=list)
    # (kind, member) of each framework process, in the order of `framework_processes`.
    frameworks: list[tuple[str, int]] = field(default_factory=list)
    framework_processes: list[subprocess.Popen | None] = field(default_factory=list)
    _supervisor: asyncio.Task | None = None
    _stopping: bool = False

    @property
    def zk_url(self) -> str:
        assert self.zookeeper is not None
        return f"zk://{self.zookeeper.address}/agora"

    @property
    def addresses(self) -> list[str]:
        return [f"{self.host}:{self.port + i}" for i in range(self.count)]

    def framework_address(self, kind: str, member: int) -> str:
        return f"{self.host}:{self.port + FRAMEWORK_PORTS[kind][member]}"

    def start_frameworks(self) -> None:
        """The batch and services pairs, on the master set (after the agents are up)."""
        self.frameworks = [(kind, m) for kind in FRAMEWORK_PORTS for m in (0, 1)]
        self.framework_processes = [self._spawn_framework(k, m) for k, m in self.frameworks]

    async def start(self) -> None:
        """Raises ZooKeeperNotInstalled (with what to install) or RuntimeError."""
        self.zookeeper = ZooKeeperServer(self.work_dir / "zookeeper")
        await asyncio.to_thread(self.zookeeper.start)
        self.processes = [self._spawn(i) for i in range(self.count)]
        self._supervisor = asyncio.create_task(self._supervise(), name="local-masters")

    def _spawn(self, i: int) -> subprocess.Popen:
        args = [
            sys.executable,
            "-m",
            "agora.cli.main",
            "master",
            "--zk",
            self.zk_url,
            "--zk-session-timeout",
            str(self.session_timeout),
            "--host",
            self.host,
            "--port",
            str(self.port + i),
            *self.extra_args,
        ]
        if self.http_port is not None:
            args += ["--http-port", str(self.http_port + i if self.http_port else 0)]
        log = open(self.work_dir / f"master-{i}.log", "ab")  # noqa: SIM115 - the child's
        try:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()

    def _spawn_framework(self, kind: str, member: int) -> subprocess.Popen:
        args = [
            sys.executable,
            "-m",
            "agora.cli.main",
            kind,
            "--master",
            self.zk_url,
            "--zk",
            f"{self.zk_url}-{kind}",
            "--zk-session-timeout",
            str(self.session_timeout),
            "--host",
            self.host,
            "--port",
            str(self.port + FRAMEWORK_PORTS[kind][member]),
            "--state-dir",
            str(self.work_dir / f"{kind}-{member}"),
            *self.extra_args,
        ]
        log = open(self.work_dir / f"{kind}-{member}.log", "ab")  # noqa: SIM115 - the child's
        try:
            return subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()

    async def _supervise(self) -> None:
        while not self._stopping:
            await asyncio.sleep(1.0)
            for i, proc in enumerate(self.processes):
                if proc is not None and proc.poll() is not None and not self._stopping:
                    print(
                        f"master {self.addresses[i]} (pid {proc.pid}) exited with code "
                        f"{proc.returncode}; starting it again",
                        flush=True,
                    )
                    self.processes[i] = self._spawn(i)
            for i, proc in enumerate(self.framework_processes):
                if proc is not None and proc.poll() is not None and not self._stopping:
                    kind, member = self.frameworks[i]
                    print(
                        f"{kind} {self.framework_address(kind, member)} (pid {proc.pid}) exited "
                        f"with code {proc.returncode}; starting it again",
                        flush=True,
                    )
                    self.framework_processes[i] = self._spawn_framework(kind, member)

    async def stop_frameworks(self) -> None:
        """First when stopping: the frameworks must not launch onto agents going away."""
        self._stopping = True
        await _terminate(self.framework_processes)

    def pids(self) -> list[int]:
        return [p.pid if p is not None else 0 for p in self.processes]

    async def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
        for group in (self.framework_processes, self.processes):
            await _terminate(group)
        if self.zookeeper is not None:
            await asyncio.to_thread(self.zookeeper.stop)


async def _terminate(processes: list[subprocess.Popen | None]) -> None:
    for proc in processes:
        if proc is not None and proc.poll() is None:
            proc.terminate()
    for proc in processes:
        if proc is not None:
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
