"""The daemons an experiment runs as real processes: the master, emulated fleets, real agents.

Each is a subprocess (so its CPU and memory are its own, measured with psutil) started in its
own session and stopped with SIGTERM (SIGKILL if it lingers). Logs go to files in the run's
directory. Whatever way an experiment ends (it fails, is interrupted, times out, gets SIGTERM
through `agora experiment`), every daemon it started and did not stop is stopped when the
process exits (`stop_all_now`, at exit), with whatever they started.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import math
import os
import random
import re
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import psutil

ROOT = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(rb"listening on (\S+:\d+)")


# Grace between SIGTERM and SIGKILL for the daemons still running at exit.
EXIT_GRACE = 5.0


class ProcessFailed(Exception):
    """A daemon did not start, or died; the message ends with the tail of its log."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Daemon:
    """One subprocess of ours; `address` is what it printed as "... listening on HOST:PORT"."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.address = ""
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()
        self._pump: asyncio.Task | None = None
        self._log: BinaryIO | None = None

    async def start(
        self, ready: re.Pattern[bytes] | None = _LISTENING, timeout: float = 60.0
    ) -> Daemon:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            env=env,
            start_new_session=True,
            limit=16 * 1024 * 1024,
        )
        _RUNNING.add(self)
        self._pump = asyncio.create_task(self._read_stdout())
        if ready is not None:
            line = await self.wait_for_line(ready, timeout)
            match = ready.search(line)
            if match and match.groups():
                self.address = match.group(1).decode()
        return self

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.put_nowait(line)
        self.lines.put_nowait(b"")

    async def wait_for_line(self, pattern: re.Pattern[bytes], timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProcessFailed(
                    f"{self.name} said nothing matching {pattern.pattern!r} in "
                    f"{timeout:g} s:\n{_tail(self.log_path)}"
                )
            try:
                line = await asyncio.wait_for(self.lines.get(), remaining)
            except TimeoutError:
                continue
            if line == b"":
                assert self.proc is not None  # b"" is queued only by _read_stdout, after start()
                raise ProcessFailed(
                    f"{self.name} exited (code {await self.proc.wait()}):\n{_tail(self.log_path)}"
                )
            if pattern.search(line):
                return line

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, timeout: float = 20.0) -> None:
        _RUNNING.discard(self)
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        if self._log is not None:
            self._log.close()
            self._log = None


# Every daemon started and not stopped yet.
_RUNNING: set[Daemon] = set()


async def stop_all(grace: float = EXIT_GRACE) -> None:
    """Stops every daemon still running, on the loop (an experiment's last step, whatever way
    it ended: a fleet whose start was interrupted is in no experiment's list yet)."""
    await asyncio.gather(*(d.stop(grace) for d in list(_RUNNING)), return_exceptions=True)


def stop_all_now(grace: float = EXIT_GRACE, descendants: bool = False) -> list[int]:
    """Stops every daemon still running, and whatever each started (an agent's task runners
    and tasks, in sessions of their own): SIGTERM to all, SIGKILL to what is left after
    `grace` seconds. Synchronous, for exit time (the last resort: a process killed with its
    loop still running). With `descendants`, also every process this one started and that is
    still its child (for `agora experiment`, whose children are all daemons of the run).
    Returns the pids it found."""
    procs: list[psutil.Process] = []
    if descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs += psutil.Process().children(recursive=True)
    for daemon in list(_RUNNING):
        _RUNNING.discard(daemon)
        if daemon.proc is None or daemon.proc.returncode is not None:
            continue
        try:
            top = psutil.Process(daemon.proc.pid)
            procs += [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    procs = list(dict.fromkeys(procs))  # a daemon's children may be listed twice
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return [p.pid for p in procs]


atexit.register(stop_all_now)


def python_m(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@dataclass
class MasterOptions:
    allocation_mode: str = "event"  # or "interval": Mesos' fixed timer
    allocation_interval: float = 1.0
    allocation_batch: float | None = None  # None: the master's default
    log_level: str = "warning"
    state_dir: Path | None = None
    http_port: int | None = None  # the dashboard's port (0: any free one); None: no dashboard
    tls: list[str] | None = None  # --tls-ca, --tls-cert, --tls-key and their files; None: none
    # pessimistic: each agent's free resources offered to one framework at a time (the
    # default); optimistic: offered to several at once, conflicts found at commit.
    offer_mode: str = "pessimistic"
    extra: list[str] = field(default_factory=list)  # more `agora master` flags, as given


def master_argv(options: MasterOptions) -> list[str]:
    """`python -m agora.cli.main master --port 0 ...` for these options."""
    args = [
        "--port", "0",
        "--allocation-mode", options.allocation_mode,
        "--allocation-interval", str(options.allocation_interval),
        "--log-level", options.log_level,
    ]  # fmt: skip
    if options.state_dir is not None:
        args += ["--state-dir", str(options.state_dir)]
    if options.allocation_batch is not None:
        args += ["--allocation-batch", str(options.allocation_batch)]
    if options.http_port is not None:
        args += ["--http-port", str(options.http_port)]
    if options.tls:
        args += options.tls
    if options.offer_mode != "pessimistic":  # passed only when asked: older masters lack it
        args += ["--offer-mode", options.offer_mode]
    args += options.extra
    return python_m("agora.cli.main", "master", *args)


async def start_master(options: MasterOptions, log_dir: Path, name: str = "master") -> Daemon:
    return await Daemon(name, master_argv(options), log_dir).start()


_READY = re.compile(rb'"event": "(ready|error)"')


async def start_fleet(
    master: str,
    agents: int,
    log_dir: Path,
    *,
    name: str = "fleet",
    resources: str | None = None,
    prefix: str = "emu",
    extra: list[str] | None = None,
    timeout: float = 600.0,
) -> tuple[Daemon, dict]:
    """An emulated fleet process; returns it once every agent registered, with its ready
    line (registration seconds and counters)."""
    argv = python_m(
        "agora.experiments.emulated",
        "--master",
        master,
        "--agents",
        str(agents),
        "--hostname-prefix",
        prefix,
        "--stats-interval",
        "0",
        *(extra or []),
    )
    if resources:
        argv += ["--resources", resources]
    daemon = await Daemon(name, argv, log_dir).start(ready=None)
    line = await daemon.wait_for_line(_READY, timeout)
    info = json.loads(line)
    if info["event"] != "ready":
        await daemon.stop()
        raise ProcessFailed(f"{name}: {info.get('message')}")
    return daemon, info


# One fleet process keeps up with this many agents' heartbeats on one core.
AGENTS_PER_FLEET_PROCESS = 5000


async def start_fleets(
    master: str | list[str],
    agents: int,
    log_dir: Path,
    resources: str | None = None,
    extra: list[str] | None = None,
) -> list[Daemon]:
    """`agents` emulated agents split evenly over as few fleet processes as can carry them,
    started in parallel; returns once every agent registered. With a list of addresses (relays)
    the fleets dial them in turn."""
    dial = [master] if isinstance(master, str) else master
    processes = max(1, math.ceil(agents / AGENTS_PER_FLEET_PROCESS), len(dial))
    sizes = [agents // processes + (1 if i < agents % processes else 0) for i in range(processes)]
    ready = await asyncio.gather(
        *(
            start_fleet(
                dial[i % len(dial)],
                n,
                log_dir,
                name=f"fleet-{i}",
                prefix=f"emu{i}",
                resources=resources,
                extra=extra,
            )
            for i, n in enumerate(sizes)
            if n
        )
    )
    return [daemon for daemon, _ in ready]


_LINKED = re.compile(rb"relay linked to the master")


async def start_relays(master: str, count: int, log_dir: Path) -> list[Daemon]:
    """`count` relays (`agora relay`) to the master, started in parallel; returns once each is
    linked to it (so agents that dial them are taken at once)."""

    async def one(i: int) -> Daemon:
        argv = agora_argv("relay", "--master", master, "--port", "0", "--log-level", "warning")
        relay = await Daemon(f"relay-{i}", argv, log_dir).start()
        await relay.wait_for_line(_LINKED, 60.0)
        return relay

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def agora_argv(command: str, *args: str) -> list[str]:
    """`python -m agora.cli.main COMMAND ARGS`."""
    return python_m("agora.cli.main", command, *args)


async def start_real_agent(
    master: str,
    log_dir: Path,
    work_dir: Path,
    resources: str,
    name: str,
    log_level: str = "warning",
    extra: list[str] | None = None,
) -> Daemon:
    argv = agora_argv(
        "agent",
        "--master",
        master,
        "--port",
        "0",
        "--work-dir",
        str(work_dir),
        "--resources",
        resources,
        "--log-level",
        log_level,
        *(extra or []),
    )
    return await Daemon(name, argv, log_dir).start()


@dataclass(frozen=True)
class ExperimentTls:
    """Certificates for a run with mutual TLS (made with `agora tls`'s code in `directory`):
    the master's, one for agents and fleets, one for the frameworks."""

    directory: Path

    @classmethod
    def make(cls, directory: Path) -> ExperimentTls:
        from agora.common.certificates import init_ca, issue

        init_ca(directory, force=True)
        for name, kind in (("master", "master"), ("agents", "agent"), ("frameworks", "framework")):
            issue(directory, name, kind, force=True)
        return cls(directory)

    def flags(self, name: str) -> list[str]:
        d = self.directory
        # One certificate stands for a whole emulated fleet: the master must not bound it as
        # it bounds one agent's principal (--max-streams-per-principal).
        unbounded = ["--max-streams-per-principal", "0"] if name == "master" else []
        return [
            "--tls-ca", str(d / "ca.pem"),
            "--tls-cert", str(d / f"{name}.pem"),
            "--tls-key", str(d / f"{name}-key.pem"),
            *unbounded,
        ]  # fmt: skip

    def credentials(self, name: str):
        from agora.common.credentials import Credentials

        d = self.directory
        return Credentials.load(d / "ca.pem", d / f"{name}.pem", d / f"{name}-key.pem")


class CpuMeter:
    """CPU time and RSS of one process (psutil), as cores used over a window."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self._cpu, self._at = self._cpu_now(), time.monotonic()

    def _cpu_now(self) -> float:
        times = self.proc.cpu_times()
        return times.user + times.system

    def reset(self) -> None:
        self._cpu, self._at = self._cpu_now(), time.monotonic()

    def cores(self) -> float:
        """Cores used since the last reset (CPU seconds per wall second)."""
        cpu, at = self._cpu_now(), time.monotonic()
        return (cpu - self._cpu) / max(at - self._at, 1e-9)

    def cpu_seconds(self) -> float:
        return self._cpu_now() - self._cpu

    def rss_mb(self) -> float:
        return self.proc.memory_info().rss / (1024 * 1024)


def launcher_pids(agent_pid: int) -> list[int]:
    """The agent's task launchers (`python -m agora.agent.executor --serve`, its children) now."""
    found = []
    try:
        children = psutil.Process(agent_pid).children()
    except psutil.NoSuchProcess:
        return []
    for child in children:
        try:
            cmdline = child.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if "agora.agent.executor" in cmdline and "--serve" in cmdline:
            found.append(child.pid)
    return found


# Ports for daemons that must keep their address across restarts (a killed master comes back
# where its agents look for it), so they cannot bind port 0. Taken below the kernel's
# ephemeral range (32768-60999 by default), which bind(0) and outgoing connections draw
# from: a port found free there cannot be handed to another process before ours binds it;
# only an explicit bind elsewhere could take it.
FIXED_PORTS = (20000, 32767)


def free_ports(n: int, rng: random.Random | None = None) -> list[int]:
    """`n` distinct ports on 127.0.0.1 free now, outside the ephemeral range."""
    rng = rng or random.Random()
    found: list[int] = []
    for _ in range(1000 * n):
        port = rng.randint(*FIXED_PORTS)
        if port in found:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == n:
            return found
    raise RuntimeError(f"found only {len(found)} of {n} free ports in {FIXED_PORTS}")


def scratch_dir(prefix: str) -> Path:
    """A new directory for a run's files that its tasks must see too (markers they write):
    not under /tmp, which a task in its own mount namespace sees as a private, empty tmpfs.
    $TMPDIR when it is set elsewhere, else /var/tmp."""
    base = os.environ.get("TMPDIR", "")
    if not base or base.rstrip("/") == "/tmp" or base.startswith("/tmp/"):
        base = "/var/tmp"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
