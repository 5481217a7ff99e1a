"""MasterConfig: every knob of the master daemon, declared once and validated in one place.

Each field's bounds, flag and help live in its metadata (common/settings.py): `agora master`
derives its flags from them, and validate() checks them with the rules across fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agora.common.credentials import INSECURE, Credentials, check_listen
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
from agora.common.task_limits import MIN_TASK_CPUS

ALLOCATION_MODES = ("event", "interval")
OFFER_MODES = ("pessimistic", "optimistic")

NONE_OR_MORE = Number(at_least=0, whole=True)  # 0: no bound
PORT = port_rule()
PORT_OR_NONE = port_rule(optional=True)


def _removal_rate(text: str) -> tuple[int, float]:
    from agora.master.removal_limit import parse_rate

    return parse_rate(text)


def _role_seconds(text: str) -> tuple[str, float]:
    """ROLE=SECONDS, for --preemption-timeout."""
    from agora.common.durations import parse_duration

    role, sep, seconds = text.partition("=")
    if not sep or not role:
        raise ValueError(f"{text!r}: write ROLE=SECONDS, e.g. analytics=30")
    value = parse_duration(seconds)
    if value <= 0:
        raise ValueError(f"{text!r}: the seconds must be more than 0")
    return role, value


def _megabytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number of MB") from None
    if not 4 <= value <= 2047:
        raise ValueError(f"{value} MB: give 4 to 2047 (gRPC's own bound)")
    return value


@dataclass
class MasterConfig:
    # Address to bind; port 0 picks a free port (tests), start() returns the real one.
    host: str = setting(
        "127.0.0.1",
        None,
        Flag(
            "--host",
            "address to bind (default {default}; use the machine's address, or "
            "0.0.0.0, so agents on other machines can reach it)",
        ),
    )
    port: int = setting(5050, PORT, Flag("--port", "port to bind (default {default}; 0 = any)"))
    # SQLite state (agents, frameworks, weights, quota) lives here; None keeps it in memory,
    # so a restart forgets everything.
    state_dir: Path | str | None = setting(
        None,
        None,
        Flag(
            "--state-dir",
            "directory for the SQLite state (default: in memory, lost on exit)",
            parse=Path,
        ),
    )
    # How often the master heartbeats agents and frameworks (and asks agents to heartbeat).
    heartbeat_interval_seconds: float = setting(
        5.0,
        SECONDS,
        Flag(
            "--heartbeat-interval",
            "heartbeat period for frameworks, and the shortest for agents, which heartbeat "
            "every third of --agent-timeout (default {default})",
            metavar="SECONDS",
        ),
    )
    # An agent silent (or disconnected) this long is removed: offers rescinded, tasks LOST.
    agent_timeout_seconds: float = setting(
        30.0,
        SECONDS,
        Flag(
            "--agent-timeout",
            "remove an agent silent this long: its offers are rescinded and its "
            "tasks reported LOST (default {default})",
            metavar="SECONDS",
        ),
    )
    # At most (count, seconds) removals of silent agents per window (Mesos'
    # --agent_removal_rate_limit, e.g. 1/10mins); None: no limit.
    agent_removal_rate_limit: tuple[int, float] | None = setting(
        None,
        None,
        Flag(
            "--agent-removal-rate-limit",
            "remove at most N silent agents per PERIOD, e.g. 1/10mins or 100/1m, so that a "
            "network failure (or a master that fell behind) does not remove them all at once; "
            "the others wait, and stay if they speak again (default: no limit)",
            metavar="N/PERIOD",
            parse=_removal_rate,
        ),
    )
    # Any change that may produce offers runs an allocation this long afterwards, so a burst of
    # changes costs one cycle; the periodic sweep is a safety net.
    allocation_batch_seconds: float = setting(
        0.002,
        SECONDS_OR_ZERO,
        Flag(
            "--allocation-batch",
            "after a change that frees resources, allocate within this window, so "
            "a burst of changes costs one cycle (default {default})",
            metavar="SECONDS",
        ),
    )
    allocation_interval_seconds: float = setting(
        1.0,
        SECONDS,
        Flag(
            "--allocation-interval",
            "periodic allocation sweep (default {default})",
            metavar="SECONDS",
        ),
    )
    # "event": the above. "interval": Mesos' default behaviour, for comparisons: allocate only
    # on a fixed timer every allocation_interval_seconds, never triggered by a change.
    allocation_mode: str = setting(
        "event",
        None,
        Flag(
            "--allocation-mode",
            "event: allocate on every change (default); interval: only on the "
            "periodic timer, like Mesos' default, for comparisons",
            choices=ALLOCATION_MODES,
        ),
    )
    # "pessimistic": an agent's free resources are offered to one framework at a time and held
    # while it decides (Mesos). "optimistic": offered to the first `optimistic_fanout`
    # frameworks in DRF order at once; an Accept commits only if its resources are still free
    # (docs/allocator.md), and a framework below its fair share keeps priority for
    # `optimistic_grace_seconds` on what it was offered.
    offer_mode: str = setting(
        "pessimistic",
        None,
        Flag(
            "--offer-mode",
            "pessimistic: each agent's free resources are offered to one framework at a "
            "time, held while it decides (Mesos; default). optimistic: offered to several "
            "frameworks at once; the first Accept wins and a conflicting one fails with ABORTED "
            "(docs/allocator.md)",
            choices=OFFER_MODES,
        ),
    )
    optimistic_fanout: int = setting(
        3,
        AT_LEAST_ONE,
        Flag(
            "--optimistic-fanout",
            "optimistic mode: how many frameworks, in DRF order, are offered the same free "
            "resources at once (default {default})",
            metavar="N",
        ),
    )
    optimistic_grace_seconds: float = setting(
        0.5,
        SECONDS_OR_ZERO,
        Flag(
            "--optimistic-grace",
            "optimistic mode: how long a framework below its fair share keeps priority on "
            "resources it was offered over a framework above its share (default {default})",
            metavar="SECONDS",
        ),
    )
    # Holds (Scheduler.Hold) last at most this long; a request naming no timeout gets it.
    max_hold_seconds: float = setting(
        300.0,
        SECONDS,
        Flag(
            "--max-hold",
            "the longest a framework's hold (Scheduler.Hold) may collect resources "
            "(default {default})",
            metavar="SECONDS",
        ),
    )
    # No flag: the command line takes the smaller of this and --max-hold.
    default_hold_seconds: float = setting(60.0, SECONDS)
    # Outstanding offers older than this are rescinded, so a framework that never answers
    # cannot hold the cluster; None (or 0 on the command line, as in Mesos) keeps them.
    offer_timeout_seconds: float | None = setting(
        60.0,
        Number(above=0, unit="seconds", optional=True),
        Flag(
            "--offer-timeout",
            "rescind offers a framework holds longer than this, so that one that never "
            "answers cannot hold the cluster (default {default}; 0 = never, as Mesos' default)",
            metavar="SECONDS",
            zero_is_none=True,
        ),
    )
    # The longest kill grace period a task or a Kill may ask for: past it the task is SIGKILLed.
    max_kill_grace_seconds: float = setting(
        300.0,
        SECONDS_OR_ZERO,
        Flag(
            "--max-kill-grace",
            "the longest kill grace period a task or a kill may ask for (default {default})",
            metavar="SECONDS",
        ),
    )
    # Messages that may wait for one framework or agent that stops reading before its stream
    # is cut (see registry.Session).
    max_send_queue: int = setting(
        50_000,
        AT_LEAST_ONE,
        Flag(
            "--max-send-queue",
            "messages that may wait for one framework or agent that has stopped reading "
            "before its stream is cut (it reconnects and fails over) (default {default})",
            metavar="N",
        ),
    )
    # History kept (registry.Bounds): ended tasks per framework, torn-down frameworks and
    # removed agents remembered; the oldest are forgotten past these, in memory and the store.
    max_completed_tasks_per_framework: int = setting(
        1000,
        AT_LEAST_ONE,
        Flag(
            "--max-completed-tasks-per-framework",
            "ended tasks remembered per framework, the oldest forgotten first (default {default})",
            metavar="N",
        ),
    )
    max_removed_frameworks: int = setting(
        1000,
        AT_LEAST_ONE,
        Flag(
            "--max-removed-frameworks",
            "torn-down frameworks remembered, with their ended tasks, in memory and in the "
            "registry; their ids are refused until forgotten (default {default})",
            metavar="N",
        ),
    )
    max_removed_agents: int = setting(
        10_000,
        AT_LEAST_ONE,
        Flag(
            "--max-removed-agents",
            "removed agents remembered in memory and in the registry; such an agent is told "
            "to register afresh (default {default})",
            metavar="N",
        ),
    )
    # Sorter names, checked by the allocator's AllocatorConfig (ValueError at start-up).
    role_sorter: str = setting(
        "drf", None, Flag("--role-sorter", "sorter among roles: drf or random")
    )
    framework_sorter: str = setting(
        "drf",
        None,
        Flag("--framework-sorter", "sorter among frameworks within a role: drf or random"),
    )
    # Filter applied to declined offers when the framework names none (Mesos: 5 s).
    default_refuse_seconds: float = setting(
        5.0,
        SECONDS_OR_ZERO,
        Flag(
            "--default-refuse-seconds",
            "filter for declined offers when the framework names none (default {default})",
            metavar="SECONDS",
        ),
    )
    # What every task must ask for at least (issue 35): without mem a task had no memory limit,
    # without cpus it was charged nothing. Mesos asks executors for 0.01 cpus and 32 MB.
    min_task_cpus: float = setting(
        MIN_TASK_CPUS,
        Number(at_least=MIN_TASK_CPUS),
        Flag(
            "--min-task-cpus",
            "every task must ask for at least this many cpus, so it is charged (default "
            "{default}; Mesos asks executors for 0.01)",
            metavar="CPUS",
        ),
    )
    min_task_mem: float = setting(
        4.0,
        Number(above=0, unit="MB"),
        Flag(
            "--min-task-mem",
            "every task must ask for at least this much memory, so it runs under a memory "
            "limit (default {default}; Mesos asks executors for 32)",
            metavar="MB",
        ),
    )
    # Preemption (master/preemptions.py): how long a role with unmet demand may stay below its
    # quota guarantee, or below its weighted fair share, before tasks of roles above theirs are
    # stopped for it; None: never (the default, as in YARN). At most this many stops a minute.
    guarantee_preemption_timeout_seconds: float | None = setting(
        None,
        Number(above=0, unit="seconds", optional=True),
        Flag(
            "--guarantee-preemption-timeout",
            "stop tasks of roles above their share for a role that has waited this long "
            "below its quota guarantee with work it cannot place (default: never)",
            metavar="SECONDS",
        ),
    )
    fair_share_preemption_timeout_seconds: float | None = setting(
        None,
        Number(above=0, unit="seconds", optional=True),
        Flag(
            "--fair-share-preemption-timeout",
            "the same for a role below its weighted fair share (default: never)",
            metavar="SECONDS",
        ),
    )
    max_preemptions_per_minute: int = setting(
        10,
        AT_LEAST_ONE,
        Flag(
            "--max-preemptions-per-minute",
            "stop at most this many tasks a minute for preemption (default {default})",
            metavar="N",
        ),
    )
    # Per role, a preemption timeout over both of the above (--preemption-timeout ROLE=SECONDS).
    role_preemption_timeouts: dict[str, float] = setting(
        None,
        None,
        Flag(
            "--preemption-timeout",
            "a role's own preemption timeout, over both above (repeat for several roles)",
            metavar="ROLE=SECONDS",
            parse=_role_seconds,
            action="append",
            to_field=dict,
        ),
        default_factory=dict,
    )
    # The web dashboard at http://host:http_port/; None: not served.
    http_port: int | None = setting(
        None,
        PORT_OR_NONE,
        Flag(
            "--http-port",
            "serve the web dashboard at http://HOST:PORT/ (default: off; 0 picks a free port)",
            metavar="PORT",
        ),
    )
    # Prometheus metrics at http://host:metrics_port/metrics; None: not served.
    metrics_port: int | None = setting(
        None,
        PORT_OR_NONE,
        Flag(
            "--metrics-port",
            "serve Prometheus metrics at http://HOST:PORT/metrics (default: off; 0 = any)",
            metavar="PORT",
        ),
    )
    # Joining (common/join_tokens.py): the CA directory (`agora tls init`, with its key) that
    # signs the certificates of machines joining with a token on join_port; None: no joins.
    join_ca_dir: Path | None = setting(
        None,
        None,
        Flag(
            "--join-ca",
            "let machines join with a token (`agora tls join-token`): the CA directory made "
            "by `agora tls init`, whose key signs their certificates (default: no joins)",
            metavar="DIR",
            parse=Path,
        ),
    )
    join_port: int = setting(
        5052,
        PORT,
        Flag(
            "--join-port",
            "where joining machines ask for their certificate, over TLS (default {default})",
            metavar="PORT",
        ),
    )
    # Days a joined machine's certificate is valid (it renews it before then).
    join_cert_days: float = setting(
        30.0,
        Number(above=0, unit="days"),
        Flag(
            "--join-cert-days",
            "validity of a joined machine's certificate; it renews it before then "
            "(default {default})",
            metavar="DAYS",
        ),
    )
    # Mutual TLS on the gRPC port (and HTTPS on the HTTP ones) when secure; from the TLS flags
    # every daemon shares (cli/options.py).
    credentials: Credentials = INSECURE
    # Listen beyond loopback without TLS anyway (the operator said --insecure).
    insecure: bool = False
    # ACLs (master/acls.py); None: every caller may do everything.
    acls_path: Path | None = setting(
        None,
        None,
        Flag(
            "--acls",
            "ACLs (YAML or JSON): which principals may register agents and frameworks, run "
            "tasks as which users, change weights and quota, drain agents, read the state; "
            "re-read on SIGHUP (default: everyone may do everything)",
            metavar="FILE",
            parse=Path,
        ),
    )
    # The door (common/call_gate.py): the largest request of Accept, Reconcile and the
    # streams' messages; of any other call; and, per named principal, the calls and streams
    # open at once (0: no bound; an emulated fleet under one certificate needs that).
    max_request_bytes: int = setting(
        64 * MB,
        AT_LEAST_ONE,
        Flag(
            "--max-request-mb",
            "the largest request of Accept, Reconcile and Acknowledge and of a stream's "
            "message; every other call takes at most 4 MB, refused before it is parsed "
            "(default {default})",
            metavar="MB",
            parse=_megabytes,
            scale=MB,
        ),
    )
    small_request_bytes: int = setting(4 * MB, AT_LEAST_ONE)
    max_calls_per_principal: int = setting(
        64,
        NONE_OR_MORE,
        Flag(
            "--max-calls-per-principal",
            "calls one principal (a certificate's or a token's name) may have open at once; "
            "0: no bound (default {default})",
            metavar="N",
        ),
    )
    max_streams_per_principal: int = setting(
        256,
        NONE_OR_MORE,
        Flag(
            "--max-streams-per-principal",
            "streams (agents' links, subscriptions, relays) one principal may have open at "
            "once; 0: no bound, for an emulated fleet sharing one certificate "
            "(default {default})",
            metavar="N",
        ),
    )
    # Operators' changes, one JSON line each (master/events.py); None: events only.
    audit_log_path: Path | None = setting(
        None,
        None,
        Flag(
            "--audit-log",
            "append every operator's change (weights, quota, drains, kills, teardowns, ACL "
            "reloads; refused attempts too) as one JSON line: who, what, when, from where, the "
            "outcome (default: only as events, `agora cluster events --topic audit`)",
            metavar="FILE",
            parse=Path,
        ),
    )

    def validate(self) -> None:
        """Raises ValueError naming the bad field and what to write instead: each field's
        own bounds (its Number), then the rules across fields."""
        check_settings(self)
        for role, seconds in self.role_preemption_timeouts.items():
            if Number(above=0).refusal(seconds) is not None:
                raise ValueError(
                    f"the preemption timeout of role {role!r} must be a positive number of "
                    f"seconds, got {seconds!r}"
                )
        if self.small_request_bytes > self.max_request_bytes:
            raise ValueError(
                f"max_request_bytes ({self.max_request_bytes}) must be at least the small "
                f"calls' bound ({self.small_request_bytes})"
            )
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
        if self.offer_mode not in OFFER_MODES:
            raise ValueError(
                f"offer_mode must be one of {', '.join(OFFER_MODES)}, got {self.offer_mode!r}"
            )
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
