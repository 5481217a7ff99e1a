"""throughput --peer slurm: the same workload on a single-node Slurm, beside Agora.

Slurm 22.05 as Debian packages it (`slurm-wlm`, `munge`), run by this process from files it
writes under the run's work dir: a munge key and its own munged, a slurm.conf, state and spool
dirs, and slurmctld and slurmd in the foreground, on loopback only, on ports picked for the run
(nothing of the machine's own Slurm or munge is used or touched). The configuration follows
Slurm's high-throughput guide where it applies to one node: no accounting, no job completion
log, `SchedulerParameters` without `defer` (`batch_sched_delay=0`), `Epilog=/bin/true`. Slurm
cannot give a task a tenth of a CPU, so the node has one CPU per task that may run at once (20
for Agora's two agents of 1 cpu / 10 tasks each) and every task asks for one CPU and the same
memory as Agora's. Measured:

- throughput: one job array of N `true` (`sbatch --array`), from the sbatch to the poll of
  squeue that finds none of it left (squeue every `POLL_SECONDS`);
- single tasks, one at a time on the idle node: `srun sh -c 'date +%s.%N'` and `sbatch --wrap`
  of the same, from starting the command to the stamp the task prints (same host clock), a
  random 0.05-1.05 s apart (Slurm's scheduler runs on a one-second tick: see `_gap`).

Everything it started is stopped at the end, whatever way the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import random
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from agora.experiments.cpu_account import Component, CpuWindow
from agora.experiments.processes import Daemon, ProcessFailed
from agora.experiments.results import Progress, summarize
from agora.experiments.throughput_paths import (
    POLL_SECONDS,
    SINGLE_GAP,
    Workload,
    cpu_per_task,
    run_command,
    single_result,
)

PROGRAMS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scontrol", "sinfo")
# Daemons live in sbin, which a user's PATH may lack.
SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")
INSTALL = "install it with `apt-get install -y slurm-wlm munge` (Debian)"
NODE = "peer0"
READY_TIMEOUT = 60.0


def find_programs() -> dict[str, str] | str:
    """Each Slurm program's path, or a one-line message naming what is missing and how to
    install it."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    found = {name: shutil.which(name, path=path) for name in PROGRAMS}
    missing = [name for name, where in found.items() if where is None]
    if missing:
        return f"--peer slurm needs Slurm, but {', '.join(missing)} is not installed: {INSTALL}"
    return {name: where for name, where in found.items() if where is not None}


@dataclass(frozen=True)
class SlurmSetup:
    cpus: int  # the node's CPUs: tasks at once, one CPU each
    memory_mb: int  # the node's memory; each task asks for the workload's
    max_array: int  # the largest job array the run submits


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(
    setup: SlurmSetup,
    *,
    host: str,
    user: str,
    munge_socket: Path,
    state: Path,
    spool: Path,
    logs: Path,
    ctld_port: int,
    slurmd_port: int,
) -> str:
    """The whole slurm.conf of the peer run."""
    return f"""\
# Written by `agora experiment throughput --peer slurm`: one node on loopback, for throughput.
ClusterName=agorapeer
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# Bind to the loopback address the names resolve to, not to every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={spool}/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd.log
SlurmctldDebug=error
SlurmdDebug=error
# No accounting, no job completion log, no cgroups: the least Slurm does per job.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
PropagateResourceLimits=NONE
# Scheduling for throughput (the high-throughput guide, without defer).
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
Epilog=/bin/true
MinJobAge=300
MaxJobCount={max(10_000, 2 * setup.max_array)}
MaxArraySize={max(1001, setup.max_array + 1)}
ReturnToService=2
# The node has more CPUs than the machine: take the configuration as it is written.
SlurmdParameters=config_overrides
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={setup.cpus} \
RealMemory={setup.memory_mb} State=UNKNOWN
PartitionName=peer Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """munged, slurmctld and slurmd of one run, from files under `work`."""

    def __init__(self, programs: dict[str, str], setup: SlurmSetup, work: Path, logs: Path):
        self.programs = programs
        self.setup = setup
        self.work = work
        self.logs = logs
        self.conf = work / "slurm.conf"
        self.daemons: dict[str, Daemon] = {}
        # munged wants its socket's directory open to all (and a unix socket's path is short):
        # a fresh directory in the system's temp dir, removed at the end.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="agora-munge-"))
        self.socket_dir.chmod(0o755)
        self.munge_socket = self.socket_dir / "munge.sock"

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def _write_files(self) -> None:
        munge, state, spool = self.work / "munge", self.work / "state", self.work / "spool"
        for directory in (munge, state, spool, self.logs):
            directory.mkdir(parents=True, exist_ok=True)
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.conf.write_text(
            slurm_conf(
                self.setup,
                host=socket.gethostname().split(".")[0],
                user=getpass.getuser(),
                munge_socket=self.munge_socket,
                state=state,
                spool=spool,
                logs=self.logs,
                ctld_port=free_port(),
                slurmd_port=free_port(),
            )
        )

    async def start(self) -> None:
        self._write_files()
        munge = self.work / "munge"
        p = self.programs
        await self._start(
            "munged",
            [p["munged"], "--foreground", "--force", f"--socket={self.munge_socket}",
             f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
             f"--seed-file={munge / 'munged.seed'}"],
        )  # fmt: skip
        await self._until("munged made its socket", self._socket_ready)
        await self._start("slurmctld", [p["slurmctld"], "-D", "-f", str(self.conf)])
        await self._start("slurmd", [p["slurmd"], "-D", "-N", NODE, "-f", str(self.conf)])
        await self._until("the Slurm node is idle", self._node_idle)

    async def _start(self, name: str, argv: list[str]) -> None:
        daemon = Daemon(f"slurm-{name}", argv, self.logs)
        self.daemons[name] = daemon
        await daemon.start(ready=None)

    async def _socket_ready(self) -> bool:
        return self.munge_socket.exists()

    async def _node_idle(self) -> bool:
        code, out, _ = await self.client("sinfo", "-h", "-n", NODE, "-o", "%T")
        return code == 0 and out.strip() == "idle"

    async def _until(self, what: str, check) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not await check():
            for daemon in self.daemons.values():
                if not daemon.alive():
                    log = daemon.log_path.read_text(errors="replace").strip().splitlines()
                    raise ProcessFailed(f"{daemon.name} exited: {' / '.join(log[-3:])}")
            if time.monotonic() > deadline:
                raise ProcessFailed(f"waited {READY_TIMEOUT:g} s for {what}; see {self.logs}")
            await asyncio.sleep(0.1)

    async def client(self, program: str, *args: str) -> tuple[int, str, str]:
        return await run_command([self.programs[program], *args], env=self.env)

    async def stop(self) -> None:
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].alive():
            with contextlib.suppress(OSError):
                await asyncio.wait_for(self.client("scontrol", "shutdown"), 10)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in self.daemons:
                await self.daemons[name].stop(timeout=10)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def components(self) -> list[Component]:
        found = [
            Component(f"slurm {name}", "daemons", daemon.pid, f"Slurm's {name}")
            for name, daemon in self.daemons.items()
        ]
        me = os.getpid()
        found.append(
            Component(
                "slurm clients", "command", me,
                "sbatch and the squeue polls (their CPU as reaped by the runner)",
                reaped_children=True,
            )
        )  # fmt: skip
        found.append(Component("runner", "runner", me, "this process: starts the clients"))
        return found


@contextlib.asynccontextmanager
async def slurm_cluster(
    programs: dict[str, str], setup: SlurmSetup, work: Path, logs: Path
) -> AsyncIterator[SlurmCluster]:
    slurm = SlurmCluster(programs, setup, work, logs)
    try:
        await slurm.start()
        yield slurm
    finally:
        await slurm.stop()


async def _job_gone(slurm: SlurmCluster, job_id: str) -> bool:
    code, out, err = await slurm.client("squeue", "-h", "-j", job_id, "-o", "%i")
    return (code == 0 and not out.strip()) or "Invalid job id" in err


async def _srun_singles(slurm: SlurmCluster, workload: Workload, count: int, progress) -> list:
    rows = []
    for n in range(count + 1):  # the first is a warm-up
        progress.show(f"slurm: single tasks through srun: {n}/{count}")
        submitted = time.time()
        code, out, err = await slurm.client(
            "srun", "-Q", "-n1", f"--mem={workload.mem:g}", "sh", "-c", "date +%s.%N"
        )
        if code != 0:
            raise ProcessFailed(f"srun exited with code {code}: {err.strip()}")
        started = float(out.split()[-1])
        if n:
            rows.append(_row("srun", n, (started - submitted) * 1000))
        await asyncio.sleep(_gap(n))
    return rows


def _gap(n: int) -> float:
    """Slurm starts a queued batch job at its scheduler's next pass, which here comes at most
    once a second: submitting right after the last job ended would always meet the pass at the
    same point. A random gap (seeded, the same in every run) puts the submits anywhere in it."""
    return SINGLE_GAP + random.Random(n).random()


async def _sbatch_singles(
    slurm: SlurmCluster, workload: Workload, count: int, progress: Progress
) -> list:
    rows = []
    stamps = slurm.work / "stamps"
    stamps.mkdir(exist_ok=True)
    for n in range(count + 1):
        progress.show(f"slurm: single tasks through sbatch: {n}/{count}")
        stamp = stamps / f"sbatch-{n}.out"
        submitted = time.time()
        code, out, err = await slurm.client(
            "sbatch", "--parsable", f"--mem={workload.mem:g}", f"--output={stamp}",
            "--error=/dev/null", "--wrap", "date +%s.%N",
        )  # fmt: skip
        if code != 0:
            raise ProcessFailed(f"sbatch exited with code {code}: {err.strip()}")
        job_id = out.strip().split(";")[0]
        started = await _read_stamp(stamp, workload.timeout)
        if n:
            rows.append(_row("sbatch", n, (started - submitted) * 1000))
        while not await _job_gone(slurm, job_id):  # the node idle again before the next
            await asyncio.sleep(0.02)
        await asyncio.sleep(_gap(n))
    return rows


async def _read_stamp(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = path.read_text()
            if text.endswith("\n"):
                return float(text.split()[-1])
        await asyncio.sleep(0.002)
    raise ProcessFailed(f"the sbatch job wrote no start stamp to {path} in {timeout:g} s")


def _row(path: str, n: int, ms: float) -> dict:
    return {
        "system": "slurm", "path": path, "kind": "single", "n": n,
        "submit_to_start_ms": ms, "finished": True,
    }  # fmt: skip


async def _array(slurm: SlurmCluster, workload: Workload, progress: Progress) -> dict:
    window = CpuWindow(slurm.components())
    window.begin()
    submitted = time.time()
    code, out, err = await slurm.client(
        "sbatch", "--parsable", f"--array=0-{workload.tasks - 1}", f"--mem={workload.mem:g}",
        "--output=/dev/null", "--error=/dev/null", "--wrap", workload.command,
    )  # fmt: skip
    if code != 0:
        raise ProcessFailed(f"sbatch --array exited with code {code}: {err.strip()}")
    job_id = out.strip().split(";")[0]
    deadline = time.monotonic() + workload.timeout
    ended_in_time = True
    while not await _job_gone(slurm, job_id):
        if time.monotonic() > deadline:
            ended_in_time = False
            break
        progress.show(f"slurm: job array of {workload.tasks}, {time.time() - submitted:.1f} s")
        await asyncio.sleep(POLL_SECONDS)
    seconds = time.time() - submitted
    window.end()
    code, out, _ = await slurm.client("scontrol", "-o", "show", "job", job_id)
    states = [w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")]
    finished = states.count("COMPLETED")
    account = window.account(workload.tasks)
    return {
        "system": "slurm",
        "path": "array",
        "label": "Slurm job array (`sbatch --array`)",
        "tasks": workload.tasks,
        "ended": len(states) if ended_in_time else None,
        "finished": finished,
        "complete": finished == workload.tasks,
        "seconds": round(seconds, 3),
        "tasks_per_second": round(workload.tasks / seconds, 2) if ended_in_time else None,
        "first_launch_seconds": None,
        "launch_span_tasks_per_second": None,
        "figures_ms": {"launch_to_running": summarize([]), "submit_to_running": summarize([])},
        "measured": {
            "submit": "the runner starts `sbatch --array=0-(N-1) ... --wrap true`",
            "end": f"the first squeue poll (every {POLL_SECONDS:g} s) that finds none of the "
            "array's tasks left; no per-task times without accounting",
        },
        "cpu": account,
        "cpu_ms_per_task": cpu_per_task(account),
        "job_id": job_id,
        "ended_in_time": ended_in_time,
    }


async def run_peer(
    programs: dict[str, str],
    setup: SlurmSetup,
    workload: Workload,
    single: int,
    work: Path,
    logs: Path,
    out: Path,
    progress: Progress,
) -> tuple[dict, dict, list]:
    """The peer's run: (its throughput run, its single-task figures, samples.csv rows)."""
    code, version, _ = await run_command([programs["slurmctld"], "-V"])
    async with slurm_cluster(programs, setup, work, logs) as slurm:
        shutil.copy(slurm.conf, out / "slurm.conf")  # what ran, beside the results
        progress.show("slurm: up", force=True)
        srun = await _srun_singles(slurm, workload, single, progress)
        sbatch = await _sbatch_singles(slurm, workload, single, progress)
        array = await _array(slurm, workload, progress)
    array["version"] = version.strip()
    array["setup"] = {
        "cpus": setup.cpus,
        "memory_mb": setup.memory_mb,
        "slurm_conf": "slurm.conf",
        "per_task": f"1 cpu, {workload.mem:g} MB",
    }
    singles = {
        "srun": single_result(
            "`srun` (waits for the task)",
            srun,
            "the runner starts `srun sh -c 'date +%s.%N'` -> the stamp the task prints",
        ),
        "sbatch": single_result(
            "`sbatch --wrap` (queues a batch job)",
            sbatch,
            "the runner starts `sbatch --wrap 'date +%s.%N'` -> the stamp the job writes",
        ),
    }
    return array, singles, srun + sbatch
