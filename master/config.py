"""MasterConfig: every knob of the master daemon, validated in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from agora.common.credentials import INSECURE, Credentials, check_listen
from agora.common.task_limits import MIN_TASK_CPUS

ALLOCATION_MODES = ("event", "interval")
OFFER_MODES = ("pessimistic", "optimistic")


@dataclass
class MasterConfig:
    # Address to bind; port 0 picks a free port (tests), start() returns the real one.
    host: str = "127.0.0.1"
    port: int = 5050
    # SQLite state (agents, frameworks, weights, quota) lives here; None keeps it in memory,
    # so a restart forgets everything.
    state_dir: Path | str | None = None
    # How often the master heartbeats agents and frameworks (and asks agents to heartbeat).
    heartbeat_interval_seconds: float = 5.0
    # An agent silent (or disconnected) this long is removed: offers rescinded, tasks LOST.
    agent_timeout_seconds: float = 30.0
    # Any change that may produce offers runs an allocation this long afterwards, so a burst of
    # changes costs one cycle; the periodic sweep is a safety net.
    allocation_batch_seconds: float = 0.002
    allocation_interval_seconds: float = 1.0
    # "event": the above. "interval": Mesos' default behaviour, for comparisons: allocate only
    # on a fixed timer every allocation_interval_seconds, never triggered by a change.
    allocation_mode: str = "event"
    # At most (count, seconds) removals of silent agents per window (Mesos'
    # --agent_removal_rate_limit, e.g. 1/10mins); None: no limit.
    agent_removal_rate_limit: tuple[int, float] | None = None
    # "pessimistic": an agent's free resources are offered to one framework at a time and held
    # while it decides (Mesos). "optimistic": offered to the first `optimistic_fanout`
    # frameworks in DRF order at once; an Accept commits only if its resources are still free
    # (docs/allocator.md), and a framework below its fair share keeps priority for
    # `optimistic_grace_seconds` on what it was offered.
    offer_mode: str = "pessimistic"
    optimistic_fanout: int = 3
    optimistic_grace_seconds: float = 0.5
    # Holds (Scheduler.Hold) last at most this long; a request naming no timeout gets it.
    max_hold_seconds: float = 300.0
    default_hold_seconds: float = 60.0
    # Outstanding offers older than this are rescinded, so a framework that never answers
    # cannot hold the cluster; None (or 0 on the command line, as in Mesos) keeps them.
    offer_timeout_seconds: float | None = 60.0
    # The longest kill grace period a task or a Kill may ask for: past it the task is SIGKILLed.
    max_kill_grace_seconds: float = 300.0
    # Messages that may wait for one framework or agent that stops reading before its stream
    # is cut (see registry.Session).
    max_send_queue: int = 50_000
    # History kept (registry.Bounds): ended tasks per framework, torn-down frameworks and
    # removed agents remembered; the oldest are forgotten past these, in memory and the store.
    max_completed_tasks_per_framework: int = 1000
    max_removed_frameworks: int = 1000
    max_removed_agents: int = 10_000
    # Sorter names, checked by the allocator's AllocatorConfig (ValueError at start-up).
    role_sorter: str = "drf"
    framework_sorter: str = "drf"
    # Filter applied to declined offers when the framework names none (Mesos: 5 s).
    default_refuse_seconds: float = 5.0
    # What every task must ask for at least (issue 35): without mem a task had no memory limit,
    # without cpus it was charged nothing. Mesos asks executors for 0.01 cpus and 32 MB.
    min_task_cpus: float = MIN_TASK_CPUS
    min_task_mem: float = 4.0
    # Preemption (master/preemptions.py): how long a role with unmet demand may stay below its
    # quota guarantee, or below its weighted fair share, before tasks of roles above theirs are
    # stopped for it; None: never (the default, as in YARN). At most this many stops a minute.
    guarantee_preemption_timeout_seconds: float | None = None
    fair_share_preemption_timeout_seconds: float | None = None
    max_preemptions_per_minute: int = 10
    # Per role, a preemption timeout over both of the above (--preemption-timeout ROLE=SECONDS).
    role_preemption_timeouts: dict[str, float] = field(default_factory=dict)
    # The web dashboard at http://host:http_port/; None: not served.
    http_port: int | None = None
    # Prometheus metrics at http://host:metrics_port/metrics; None: not served.
    metrics_port: int | None = None
    # Joining (common/join_tokens.py): the CA directory (`agora tls init`, with its key) that
    # signs the certificates of machines joining with a token on join_port; None: no joins.
    join_ca_dir: Path | None = None
    join_port: int = 5052
    # Days a joined machine's certificate is valid (it renews it before then).
    join_cert_days: float = 30.0
    # Mutual TLS on the gRPC port (and HTTPS on the HTTP ones) when secure.
    credentials: Credentials = INSECURE
    # Listen beyond loopback without TLS anyway (the operator said --insecure).
    insecure: bool = False
    # ACLs (master/acls.py); None: every caller may do everything.
    acls_path: Path | None = None
    # The door (common/call_gate.py): the largest request of Accept, Reconcile and the
    # streams' messages; of any other call; and, per named principal, the calls and streams
    # open at once (0: no bound; an emulated fleet under one certificate needs that).
    max_request_bytes: int = 64 * 1024 * 1024
    small_request_bytes: int = 4 * 1024 * 1024
    max_calls_per_principal: int = 64
    max_streams_per_principal: int = 256
    # Operators' changes, one JSON line each (master/events.py); None: events only.
    audit_log_path: Path | None = None

    def validate(self) -> None:
        """Raises ValueError naming the bad field and what to write instead."""
        if self.small_request_bytes > self.max_request_bytes:
            raise ValueError(
                f"max_request_bytes ({self.max_request_bytes}) must be at least the small "
                f"calls' bound ({self.small_request_bytes})"
            )
        if self.max_send_queue < 1:
            raise ValueError(f"max_send_queue must be at least 1, got {self.max_send_queue}")
        for name in (
            "max_completed_tasks_per_framework",
            "max_removed_frameworks",
            "max_removed_agents",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        check_listen("the master", self.host, self.credentials, self.insecure)
        if self.join_ca_dir is not None:
            if not self.credentials.secure:
                raise ValueError(
                    "joining (--join-ca) needs the master's TLS: give --tls-ca, --tls-cert "
                    "and --tls-key (joining machines check the master's certificate)"
                )
            if self.credentials.tokens is not None:
                raise ValueError(
                    "joining (--join-ca) needs the master to ask callers for certificates, "
                    "which --tokens turns off: give one or the other"
                )
            if not 0 <= self.join_port <= 65535:
                raise ValueError(f"join_port must be in 0-65535, got {self.join_port}")
            if not (math.isfinite(self.join_cert_days) and self.join_cert_days > 0):
                raise ValueError(
                    f"join_cert_days must be a positive number of days, got {self.join_cert_days}"
                )
        positive = {
            "heartbeat_interval_seconds": self.heartbeat_interval_seconds,
            "agent_timeout_seconds": self.agent_timeout_seconds,
            "allocation_interval_seconds": self.allocation_interval_seconds,
        }
        if self.offer_timeout_seconds is not None:
            positive["offer_timeout_seconds"] = self.offer_timeout_seconds
        for name in (
            "guarantee_preemption_timeout_seconds",
            "fair_share_preemption_timeout_seconds",
        ):
            if getattr(self, name) is not None:
                positive[name] = getattr(self, name)
        for role, seconds in self.role_preemption_timeouts.items():
            if not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(
                    f"the preemption timeout of role {role!r} must be a positive number of "
                    f"seconds, got {seconds}"
                )
        if self.max_preemptions_per_minute < 1:
            raise ValueError(
                f"max_preemptions_per_minute must be at least 1, got "
                f"{self.max_preemptions_per_minute}"
            )
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if not (math.isfinite(self.min_task_cpus) and self.min_task_cpus >= MIN_TASK_CPUS):
            raise ValueError(
                f"min_task_cpus must be at least {MIN_TASK_CPUS:g}, got {self.min_task_cpus}"
            )
        if not (math.isfinite(self.min_task_mem) and self.min_task_mem > 0):
            raise ValueError(f"min_task_mem must be more than 0 MB, got {self.min_task_mem}")
        for name, value in {
            "allocation_batch_seconds": self.allocation_batch_seconds,
            "default_refuse_seconds": self.default_refuse_seconds,
        }.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be 0 or more seconds, got {value}")
        if self.offer_mode not in OFFER_MODES:
            raise ValueError(
                f"offer_mode must be one of {', '.join(OFFER_MODES)}, got {self.offer_mode!r}"
            )
        if self.optimistic_fanout < 1:
            raise ValueError(f"optimistic_fanout must be at least 1, got {self.optimistic_fanout}")
        if not (
            math.isfinite(self.optimistic_grace_seconds) and self.optimistic_grace_seconds >= 0
        ):
            raise ValueError(
                "optimistic_grace_seconds must be 0 or more seconds, "
                f"got {self.optimistic_grace_seconds}"
            )
        for name in ("max_hold_seconds", "default_hold_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if self.default_hold_seconds > self.max_hold_seconds:
            raise ValueError(
                f"default_hold_seconds ({self.default_hold_seconds}) must not exceed "
                f"max_hold_seconds ({self.max_hold_seconds})"
            )
        if self.allocation_mode not in ALLOCATION_MODES:
            raise ValueError(
                f"allocation_mode must be one of {', '.join(ALLOCATION_MODES)}, "
                f"got {self.allocation_mode!r}"
            )
        if self.agent_timeout_seconds <= self.heartbeat_interval_seconds:
            raise ValueError(
                f"agent_timeout_seconds ({self.agent_timeout_seconds}) must exceed "
                f"heartbeat_interval_seconds ({self.heartbeat_interval_seconds}), or every "
                "agent would time out between two heartbeats"
            )

    @property
    def agent_heartbeat_seconds(self) -> float:
        """How often agents heartbeat (told in Registered): a third of the agent timeout, so a
        live agent misses three before it is removed, and never more often than
        heartbeat_interval_seconds. The heartbeats are the master's evidence that an agent is
        alive and each costs the master about 0.1 ms of Python: with the default timeout of
        30 s, one every 10 s halves that cost of 10,000 idle agents against one every 5 s,
        with the same guarantee (an agent gone is removed after the same 30 s)."""
        return max(self.heartbeat_interval_seconds, self.agent_timeout_seconds / 3)

    @property
    def state_path(self) -> Path | None:
        return None if self.state_dir is None else Path(self.state_dir) / "master.sqlite3"
