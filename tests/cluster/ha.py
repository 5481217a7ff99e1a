"""A set of `agora master --zk` processes on one real ZooKeeper, and agents pointed at the set."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from harness import ROOT, Daemon, eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MasterSet:
    """`n` masters standing for election under a path of their own on `zk_address`. Fixed
    ports, so that a master re-executing itself after stepping down comes back where it was."""

    def __init__(
        self,
        root: Path,
        zk_address: str,
        n: int = 3,
        session_timeout: float = 1.5,
        heartbeat: float = 0.5,
        agent_timeout: float = 10.0,
    ) -> None:
        self.root = root
        self.url = f"zk://{zk_address}/ha-{uuid.uuid4().hex[:8]}"
        self.ports = [free_port() for _ in range(n)]
        self.session_timeout = session_timeout
        self.heartbeat = heartbeat
        self.agent_timeout = agent_timeout
        self.masters: list[Daemon | None] = [None] * n
        self.agents: list[Daemon] = []

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    @property
    def as_list(self) -> str:
        return ",".join(self.addresses)

    def start_master(self, i: int, zk_url: str | None = None) -> Daemon:
        self.masters[i] = Daemon(
            [
                "master",
                "--zk",
                zk_url or self.url,
                "--zk-session-timeout",
                str(self.session_timeout),
                "--port",
                str(self.ports[i]),
                "--heartbeat-interval",
                str(self.heartbeat),
                "--agent-timeout",
                str(self.agent_timeout),
                "--log-level",
                "debug",
            ],
            self.root / "logs" / f"master-{i}.log",
        ).start()
        return self.masters[i]

    def start(self) -> MasterSet:
        for i in range(len(self.ports)):
            self.start_master(i)
        return self

    def roster(self, via: str | None = None) -> list[dict]:
        """`agora cluster masters --json`, as a user would ask it."""
        out = agora("cluster", "masters", "--json", "--master", via or self.url)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def leader_index(self) -> int:
        """Which master leads, waiting for an election; -1 never (raises on timeout)."""
        found: list[int] = []

        def elected() -> bool:
            out = agora("cluster", "masters", "--json", "--master", self.url, "--timeout", "3")
            if out.returncode != 0:
                return False
            rows = json.loads(out.stdout)
            leaders = [r["address"] for r in rows if r["leading"]]
            if leaders and leaders[0] in self.addresses:
                found[:] = [self.addresses.index(leaders[0])]
                return True
            return False

        eventually(elected, timeout=30, message="a leader elected")
        return found[0]

    def start_agent(self, index: int, master: str | None = None) -> Daemon:
        first = 41000 + index * 1000
        agent = Daemon(
            [
                "agent",
                "--master",
                master or self.url,
                "--port",
                "0",
                "--resources",
                f"cpus:2;mem:2048;disk:4096;ports:[{first}-{first + 999}]",
                "--work-dir",
                str(self.root / f"agent-{index}"),
                "--hostname",
                f"host-{index}",
                "--log-level",
                "debug",
            ],
            self.root / "logs" / f"agent-{index}.log",
        ).start()
        self.agents.append(agent)
        return agent

    def stop(self) -> None:
        import signal

        for agent in self.agents:
            agent.stop(sig=signal.SIGUSR1)
        for master in self.masters:
            if master is not None:
                master.stop()

    def logs(self) -> str:
        parts = []
        for d in [*self.masters, *self.agents]:
            if d is not None:
                parts.append(f"--- {d.log_path.name}\n{d.log_tail(60)}")
        return "\n".join(parts)


def agora(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ZkProxy:
    """A TCP proxy in front of ZooKeeper: `cut()` black-holes every connection through it (the
    bytes are read and dropped, nothing is answered, as a partition does), `heal()` lets new
    connections through again. One master pointed at it can be partitioned from ZooKeeper while
    it still reaches, and is reached by, everything else."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.cut_off = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.cut_off.set()

    def heal(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.cut_off.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass
