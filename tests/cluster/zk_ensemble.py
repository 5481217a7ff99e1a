"""A three-server ZooKeeper ensemble on loopback (Debian's package, QuorumPeerMain), for the
tests that restart its servers one by one or take its quorum away."""

from __future__ import annotations

from pathlib import Path

from ha import free_port

from agora.common.zookeeper_server import ZooKeeperServer


class Ensemble:
    def __init__(self, root: Path, n: int = 3) -> None:
        peers = {i: (free_port(), free_port(), free_port()) for i in range(1, n + 1)}
        self.servers = [
            ZooKeeperServer(root / f"zk-{i}", ensemble=peers, myid=i) for i in sorted(peers)
        ]

    @property
    def address(self) -> str:
        """host:port,host:port,... as a zk:// URL lists them."""
        return ",".join(s.address for s in self.servers)

    def start(self) -> Ensemble:
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_serving(60)
        return self

    def leader(self) -> int:
        """The index of the server that leads the ensemble (-1 while none does)."""
        modes = [s.mode() for s in self.servers]
        return modes.index("leader") if "leader" in modes else -1

    def restart(self, i: int) -> None:
        """Stops server `i` and starts it again, waiting until it serves (in the quorum)."""
        self.servers[i].stop()
        self.servers[i].launch()
        self.servers[i].wait_serving(60)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
