"""A ZooKeeper server from Debian's `zookeeper` package, for `agora local --masters N`, the
failover experiment and tests.

One standalone server (ZooKeeperServerMain) on loopback, its data in a directory of ours; a JVM
of its own that we start, wait for (until "srvr" reports its mode) and stop. Production runs a
ZooKeeper ensemble managed by its operators; this is only for trying HA on one machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ZooKeeperNotInstalled", "ZooKeeperServer", "zookeeper_classpath"]

# Where Debian's package puts the server's jars.
_JARS = (Path("/usr/share/java/zookeeper.jar"),)


class ZooKeeperNotInstalled(RuntimeError):
    """No ZooKeeper or Java on this machine; the message says what to install."""


def zookeeper_classpath() -> str:
    java = shutil.which("java")
    missing = [str(j) for j in _JARS if not j.exists()]
    if java is None or missing:
        raise ZooKeeperNotInstalled(
            "ZooKeeper is not installed: apt-get install zookeeper (it brings Java), "
            "or run `make system-deps`"
        )
    return os.pathsep.join(str(j) for j in _JARS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(address: str, word: str = "ruok", timeout: float = 1.0) -> str:
    """ZooKeeper's admin command `word` sent to `address`; "" when it does not answer."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while data := s.recv(4096):
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1:`port` (a free one by default), data in `root`."""

    def __init__(
        self,
        root: Path,
        port: int = 0,
        tick_ms: int = 200,
        host: str = "127.0.0.1",
        prefix: list[str] | None = None,
        ensemble: dict[int, tuple[int, int, int]] | None = None,
        myid: int = 0,
    ) -> None:
        """`host`: the address to listen on; `prefix`: a command to run the server under, e.g.
        `ip netns exec NS` (tests put ZooKeeper on a "host" of its own). `ensemble`: every
        server of an ensemble on this host, {myid: (client port, quorum port, election
        port)}, with `myid` this one's (QuorumPeerMain instead of a standalone server)."""
        self.root = Path(root)
        self.host = host
        self.prefix = list(prefix or [])
        self.port = port or _free_port()
        # Session timeouts a client may ask for are bounded to [2, 20] ticks: 200 ms ticks let a
        # client choose anything from 0.4 s to 4 s, which fast failover needs.
        self.tick_ms = tick_ms
        self.ensemble = ensemble or {}
        self.myid = myid
        if self.ensemble:
            self.port = self.ensemble[myid][0]
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        """Starts the server and waits until it serves (an ensemble's server: until a quorum
        of its ensemble runs, so start its peers with `launch` first)."""
        self.launch()
        return self.wait_serving(timeout)

    def launch(self) -> None:
        """Starts the server's process without waiting for it to serve."""
        classpath = zookeeper_classpath()
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.root / "zoo.cfg"
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={data}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxSessionTimeout=20000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
        ]
        main = "org.apache.zookeeper.server.ZooKeeperServerMain"
        if self.ensemble:
            # A quorum of peers: followers sync within 10 ticks of joining and answer the
            # leader within 5, as ZooKeeper's sample configuration says.
            lines += ["initLimit=10", "syncLimit=5"]
            lines += [
                f"server.{n}={self.host}:{quorum}:{election}"
                for n, (_, quorum, election) in sorted(self.ensemble.items())
            ]
            (data / "myid").write_text(f"{self.myid}\n")
            main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        config.write_text("\n".join(lines) + "\n")
        log = open(self.root / "zookeeper.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [*self.prefix, "java", "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath]
            + [f"-Dzookeeper.log.dir={self.root}"]
            + [main, str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def mode(self) -> str:
        """ "standalone", "leader" or "follower" while it serves; "" otherwise."""
        for line in self._ask("srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def wait_serving(self, timeout: float = 30.0) -> ZooKeeperServer:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        # "ruok" answers before the server serves; "srvr" names its mode once it does.
        while not self.mode():
            if self.process.poll() is not None:
                tail = (self.root / "zookeeper.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ZooKeeper exited with code {self.process.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer on {self.address} in {timeout:g}s")
            time.sleep(0.1)
        return self

    def _ask(self, word: str) -> str:
        """A four-letter word, asked from where the server runs (its namespace, if any)."""
        if not self.prefix:
            return four_letter_word(self.address, word)
        code = (
            "from agora.common.zookeeper_server import four_letter_word as f; "
            f"print(f({self.address!r}, {word!r}))"
        )
        done = subprocess.run(
            [*self.prefix, sys.executable, "-c", code], capture_output=True, text=True
        )
        return done.stdout

    def stop(self, kill: bool = False) -> None:
        """Stops the server (SIGTERM, or SIGKILL with `kill`); its data stays for a restart."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
