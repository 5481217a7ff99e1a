"""AgentConfig: every knob of the agent daemon, declared once and validated in one place.

Each field's bounds, flag and help live in its metadata (common/settings.py): `agora agent`
derives its flags from them, and validate() checks them with the rules across fields. Fields
without a flag are for tests and embedders (the emulated fleet, the harnesses)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from agora.agent.sandbox_watch import (
    DEFAULT_GC_DELAY,
    DEFAULT_GC_HEADROOM,
    DEFAULT_INTERVAL,
    DEFAULT_MAX_LOG_BYTES,
)
from agora.agent.task_manager import DEFAULT_KILL_GRACE
from agora.common import Resources, parse_attributes
from agora.common.credentials import INSECURE, Credentials
from agora.common.settings import (
    AT_LEAST_ONE,
    MB,
    SECONDS,
    SECONDS_OR_ZERO,
    Flag,
    Number,
    check_settings,
    port_rule,
    setting,
)

# Enough for a build's `make -j` or a JVM's threads; a fork bomb is stopped long before the
# host's own limit (pid_max, 4 million on 64-bit Linux).
DEFAULT_TASK_PIDS_MAX = 1024


def _resources(text: str) -> Resources:
    resources = Resources.parse(text)  # a ResourceError (ValueError) says what is wrong
    if resources.is_empty():
        raise ValueError("no resources given: write e.g. 'cpus:4;mem:4096;ports:[31000-32000]'")
    return resources


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"{text!r} is not a positive number of MB")
    return value


@dataclass
class AgentConfig:
    master: str  # the master: "host:port", a list of them, or zk://... (common/masters)
    # Where the Agent service listens; None: the address this machine reaches the master
    # from (so what the agent advertises is what the master's side can reach), the command
    # line's default.
    host: str | None = setting(
        "127.0.0.1",
        None,
        Flag(
            "--host",
            "address for this agent's own gRPC service (task logs, sandboxes), which it "
            "advertises to the master; 0.0.0.0 for all (default: the address this machine "
            "reaches the master from: 127.0.0.1 for a master on this machine; off loopback that "
            "needs TLS or --insecure)",
            flag_default=None,
        ),
    )
    port: int = setting(
        5051,
        port_rule(),
        Flag(
            "--port",
            "port for this agent's gRPC service; 0 picks a free one (default: {default})",
        ),
    )
    # None: detect with Mesos' rules.
    resources: Resources | None = setting(
        None,
        None,
        Flag(
            "--resources",
            "resources to offer, in Mesos syntax: 'cpus:4;mem:4096;disk:8192;"
            "ports:[31000-32000]' (mem and disk in MB; 'cpus(role):2' reserves for a role). "
            "Default: detected: all CPUs, memory minus 1 GB (half if under 2 GB), disk of "
            "--work-dir minus 5 GB (half if under 10 GB), ports 31000-32000",
            metavar="SPEC",
            parse=_resources,
        ),
    )
    attributes: dict[str, str] = setting(
        None,
        None,
        Flag(
            "--attributes",
            "attributes for placement constraints, e.g. 'rack:r1;zone:z1'",
            metavar="SPEC",
            parse=parse_attributes,
        ),
        default_factory=dict,
    )
    # The command line's default is ./agora-agent-PORT.
    work_dir: Path = setting(
        Path("agora-agent"),
        None,
        Flag(
            "--work-dir",
            "where sandboxes and checkpoints live; reuse it across restarts so the agent "
            "keeps its id and its running tasks (default: ./agora-agent-PORT)",
            metavar="DIR",
            parse=Path,
            flag_default=None,
        ),
    )
    # The IP others use to reach this agent.
    advertise_ip: str | None = setting(
        None,
        None,
        Flag(
            "--advertise-ip",
            "IP address the master gives to clients for reaching this agent (default: --host, "
            "or with --host 0.0.0.0 the address this machine reaches the master from); the "
            "master refuses a loopback address from an agent on another machine",
            metavar="IP",
        ),
    )
    # None: socket.gethostname().
    hostname: str | None = setting(
        None,
        None,
        Flag("--hostname", "hostname reported to the master (default: this machine's hostname)"),
    )
    # Used until the master states its own interval in Registered.
    heartbeat_interval_seconds: float = setting(5.0, SECONDS)
    reconnect_backoff_initial_seconds: float = setting(0.2, SECONDS)
    # Doubling to 10 s (each wait drawn from the upper half of its band, so agents cut off
    # together do not arrive all at once): a master down for a moment is back within about as
    # long again, and one that is gone or refuses the agent is not dialled every half second.
    reconnect_backoff_max_seconds: float = setting(10.0, SECONDS)
    update_backoff_initial_seconds: float = setting(0.5, SECONDS)
    update_backoff_max_seconds: float = setting(10.0, SECONDS)
    default_kill_grace_seconds: float = setting(DEFAULT_KILL_GRACE, SECONDS_OR_ZERO)
    # Put each task in cgroups limiting its memory (and weighting its CPU) where the host
    # lets the agent create them; otherwise tasks get process-group isolation only.
    cgroups: bool = setting(
        True,
        None,
        Flag(
            "--isolation",
            "cgroups: put each task in cgroups (v2 or v1, whichever the host has) that limit "
            "its memory to its mem and weight its CPU by its cpus, where the agent may "
            "create them; none: process groups only (default: {default})",
            choices={"cgroups": True, "none": False},
        ),
    )
    # Also cap each task's CPU at its cpus with a CFS quota (Mesos' --cgroups_enable_cfs).
    cpu_hard_limit: bool = setting(
        False,
        None,
        Flag(
            "--cpu-hard-limit",
            "also cap each task's CPU at its cpus with a CFS quota (needs --isolation cgroups)",
        ),
    )
    # Processes and threads a task may have at once (the pids cgroup); 0: no bound. A fork bomb
    # stops there instead of at the host's limit.
    task_pids_max: int = setting(
        DEFAULT_TASK_PIDS_MAX,
        Number(at_least=0, whole=True),
        Flag(
            "--task-pids-max",
            "processes and threads each task may have at once (the pids cgroup): a fork bomb "
            "stops there; 0 = no bound (default {default})",
            metavar="N",
        ),
    )
    # Prometheus metrics at http://host:metrics_port/metrics; None: not served.
    metrics_port: int | None = setting(
        None,
        port_rule(optional=True),
        Flag(
            "--metrics-port",
            "serve Prometheus metrics at http://HOST:PORT/metrics, on --host (default: off; "
            "0 picks a free port)",
            metavar="PORT",
        ),
    )
    # How often running tasks' usage is sampled for the metrics.
    usage_interval_seconds: float = setting(5.0, SECONDS)
    # Every this many seconds the sandboxes are checked: disk limits, log rotation.
    sandbox_watch_interval_seconds: float = setting(DEFAULT_INTERVAL, SECONDS)
    # stdout and stderr are rotated past this size (copied to stdout.1, emptied).
    max_log_bytes: int = setting(
        DEFAULT_MAX_LOG_BYTES,
        AT_LEAST_ONE,
        Flag(
            "--max-log-mb",
            "rotate a task's stdout and stderr past this size: copied to stdout.1 and emptied "
            "(default {default})",
            metavar="MB",
            parse=_megabytes,
            scale=MB,
        ),
    )
    # Kill a task whose sandbox outgrows its `disk` resource (Mesos' disk/du isolator).
    enforce_disk: bool = setting(
        True,
        None,
        Flag(
            "--no-disk-limit",
            "do not kill tasks whose sandbox outgrows their disk resource (checked every "
            "15 s, like Mesos' disk/du isolator; on by default)",
            negate=True,
        ),
    )
    # Completed tasks' sandboxes are removed this long after (Mesos' --gc_delay), sooner as
    # the disk fills past 1 - gc_disk_headroom (sandbox_watch.gc_delay_now).
    gc_delay_seconds: float = setting(
        DEFAULT_GC_DELAY,
        SECONDS_OR_ZERO,
        Flag(
            "--gc-delay",
            "remove a finished task's sandbox this long after its final status is "
            "acknowledged, sooner as the disk fills (default one week, like Mesos' --gc_delay)",
            metavar="SECONDS",
        ),
    )
    gc_disk_headroom: float = setting(
        DEFAULT_GC_HEADROOM,
        Number(at_least=0, at_most=1, noun="a fraction"),
        Flag(
            "--gc-disk-headroom",
            "sandboxes are kept for gc-delay x (1 - headroom - disk used): with 0.1, they go "
            "at once once the disk is 90%% full (default {default})",
            metavar="FRACTION",
        ),
    )
    # Mutual TLS to the master and on the Agent service (and HTTPS for metrics) when secure;
    # from the TLS flags every daemon shares (cli/options.py).
    credentials: Credentials = INSECURE
    # Listen beyond loopback without TLS anyway (the operator said --insecure).
    insecure: bool = False
    # Completed task runs remembered (their records; sandboxes go by gc_delay_seconds).
    max_completed_tasks: int = setting(
        1000,
        AT_LEAST_ONE,
        Flag(
            "--max-completed-tasks",
            "completed tasks remembered (ListTasks, their files until garbage-collected), the "
            "oldest forgotten first (default {default})",
            metavar="N",
        ),
    )
    # ACLs (the master's file format); their read_sandboxes rules govern the file API here
    # (agent/file_access.py). None: every caller may read.
    acls_path: Path | None = setting(
        None,
        None,
        Flag(
            "--acls",
            "the master's ACL file (YAML or JSON); its read_sandboxes rules say who besides a "
            "task's own framework and the master may read the task's sandbox here and see its "
            "environment; re-read on SIGHUP (default: every caller may)",
            metavar="FILE",
            parse=Path,
        ),
    )
    # Variables of the agent's environment that tasks get too (agent/task_env.py); nothing
    # else of it reaches a task.
    task_env: tuple[str, ...] = setting(
        (),
        None,
        Flag(
            "--task-env",
            "a variable of this agent's environment that tasks get too (repeat for more; e.g. "
            "--task-env http_proxy --task-env TZ); nothing else of the agent's environment "
            "reaches a task: it starts from PATH=/usr/local/sbin:...:/bin and Agora's variables",
            metavar="NAME",
            action="append",
            to_field=tuple,
        ),
    )
    # The OCI runtime that runs tasks from images (agent/containers.py); None: runc on PATH.
    container_runtime: str | None = setting(
        None,
        None,
        Flag(
            "--container-runtime",
            "the OCI runtime that runs tasks from images, taking runc's command line "
            "(default: runc on PATH; crun works where the host's cgroups let it start)",
            metavar="PATH",
        ),
    )
    # NVIDIA GPUs to offer, as device indices "0,1" (agent/gpus.py); None: those found.
    gpus: str | None = setting(
        None,
        None,
        Flag(
            "--gpus",
            "the NVIDIA GPUs to offer, as device indices, e.g. 0,1 (default: those nvidia-smi "
            "or /proc/driver/nvidia finds); each is given to one task at a time, which sees it "
            "as CUDA_VISIBLE_DEVICES",
            metavar="INDICES",
        ),
    )
    # Every plain task in pid, mount, ipc and uts namespaces of its own, with its own /proc, a
    # private /tmp and the other sandboxes hidden (agent/task_wrapper.c, --ns): True insists,
    # False never, None where the host allows it (agent/task_namespaces.py).
    task_namespaces: bool | None = setting(
        None,
        None,
        Flag(
            "--task-namespaces",
            "every task in pid, mount, ipc and uts namespaces of its own: /proc shows its "
            "own processes only, /tmp and /dev/shm are private (/tmp sized by its disk, else "
            "64 MB) and other tasks' sandboxes are hidden. Default: on where the host allows it "
            "(root with CAP_SYS_ADMIN, and a C compiler for the task wrapper), else off with a "
            "warning; --task-namespaces refuses to start without them, --no-task-namespaces "
            "turns them off (tasks from images always get them)",
            action=argparse.BooleanOptionalAction,
        ),
    )

    def validate(self) -> None:
        """Raises ValueError naming the bad field and what to write instead: each field's
        own bounds (its Number), then the rules across fields, as MasterConfig.validate."""
        check_settings(self)
        for name in self.task_env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"task_env: {name!r} is not a variable name (e.g. http_proxy)")
        for kind in ("reconnect", "update"):
            low = getattr(self, f"{kind}_backoff_initial_seconds")
            high = getattr(self, f"{kind}_backoff_max_seconds")
            if high < low:
                raise ValueError(
                    f"{kind}_backoff_max_seconds ({high}) must not be below "
                    f"{kind}_backoff_initial_seconds ({low})"
                )
