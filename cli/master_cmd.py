"""`agora master`: the master daemon."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from agora.cli.errors import CommandError, UsageError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_log_flags,
    daemon_credentials,
    port_number,
    restart_as_standby,
    setup_logging,
    start_unless_stopped,
)


def _removal_rate(text: str) -> tuple[int, float]:
    from agora.master.removal_limit import parse_rate

    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _role_seconds(text: str) -> tuple[str, float]:
    """argparse type for ROLE=SECONDS."""
    role, sep, seconds = text.partition("=")
    if not sep or not role:
        raise argparse.ArgumentTypeError(f"{text!r}: write ROLE=SECONDS, e.g. analytics=30")
    return role, _seconds(seconds)


def _megabytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of MB") from None
    if not 4 <= value <= 2047:
        raise argparse.ArgumentTypeError(f"{value} MB: give 4 to 2047 (gRPC's own bound)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text.rstrip("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be 0 or more")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "master",
        help="run the master daemon",
        description=(
            "Runs the master: agents connect to it, frameworks subscribe to it, and it offers "
            "the agents' resources to frameworks in Dominant Resource Fairness order. With "
            "--state-dir it keeps its registry of agents and frameworks in SQLite, so that after "
            "a restart agents and frameworks re-register with the ids they had. With --zk it is "
            "one of a set of masters: they elect a leader on ZooKeeper, keep the registry there, "
            "and the others stand by, naming the leader to anyone who calls them."
        ),
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; use the machine's address, or "
        "0.0.0.0, so agents on other machines can reach it)",
    )
    p.add_argument(
        "--port", type=port_number, default=5050, help="port to bind (default 5050; 0 = any)"
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="directory for the SQLite state (default: in memory, lost on exit)",
    )
    p.add_argument(
        "--zk",
        default=None,
        metavar="zk://HOST:PORT[,HOST:PORT...]/PATH",
        help="run as one of a set of masters coordinated by ZooKeeper: elect a leader under "
        "PATH and keep the registry there (instead of --state-dir); e.g. "
        "zk://h1:2181,h2:2181,h3:2181/agora",
    )
    p.add_argument(
        "--zk-session-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="ZooKeeper session timeout: a leader that dies is replaced this long after, and "
        "a leader that hears nothing from ZooKeeper for 0.8 of it steps down (default 1.5; "
        "the ZooKeeper server may round it into its own bounds; 3 rides out a rolling restart "
        "of an ensemble)",
    )
    p.add_argument(
        "--advertise-ip",
        default=None,
        metavar="IP",
        help="the address other machines reach this master at, published in ZooKeeper with "
        "--zk (default: --host)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=_seconds,
        default=5.0,
        metavar="SECONDS",
        help="heartbeat period for frameworks, and the shortest for agents, which heartbeat "
        "every third of --agent-timeout (default 5)",
    )
    p.add_argument(
        "--agent-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="remove an agent silent this long: its offers are rescinded and its "
        "tasks reported LOST (default 30)",
    )
    p.add_argument(
        "--agent-removal-rate-limit",
        type=_removal_rate,
        default=None,
        metavar="N/PERIOD",
        help="remove at most N silent agents per PERIOD, e.g. 1/10mins or 100/1m, so that a "
        "network failure (or a master that fell behind) does not remove them all at once; "
        "the others wait, and stay if they speak again (default: no limit)",
    )
    p.add_argument(
        "--allocation-batch",
        type=_seconds,
        default=0.002,
        metavar="SECONDS",
        help="after a change that frees resources, allocate within this window, so "
        "a burst of changes costs one cycle (default 0.002)",
    )
    p.add_argument(
        "--allocation-interval",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="periodic allocation sweep (default 1)",
    )
    p.add_argument(
        "--allocation-mode",
        choices=["event", "interval"],
        default="event",
        help="event: allocate on every change (default); interval: only on the "
        "periodic timer, like Mesos' default, for comparisons",
    )
    p.add_argument(
        "--offer-mode",
        choices=["pessimistic", "optimistic"],
        default="pessimistic",
        help="pessimistic: each agent's free resources are offered to one framework at a "
        "time, held while it decides (Mesos; default). optimistic: offered to several "
        "frameworks at once; the first Accept wins and a conflicting one fails with ABORTED "
        "(docs/allocator.md)",
    )
    p.add_argument(
        "--optimistic-fanout",
        type=int,
        default=3,
        metavar="N",
        help="optimistic mode: how many frameworks, in DRF order, are offered the same free "
        "resources at once (default 3)",
    )
    p.add_argument(
        "--optimistic-grace",
        type=_seconds,
        default=0.5,
        metavar="SECONDS",
        help="optimistic mode: how long a framework below its fair share keeps priority on "
        "resources it was offered over a framework above its share (default 0.5)",
    )
    p.add_argument(
        "--max-hold",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="the longest a framework's hold (Scheduler.Hold) may collect resources (default 300)",
    )
    p.add_argument(
        "--offer-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="rescind offers a framework holds longer than this, so that one that never "
        "answers cannot hold the cluster (default 60; 0 = never, as Mesos' default)",
    )
    p.add_argument(
        "--max-kill-grace",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="the longest kill grace period a task or a kill may ask for (default 300)",
    )
    p.add_argument(
        "--max-send-queue",
        type=int,
        default=50_000,
        metavar="N",
        help="messages that may wait for one framework or agent that has stopped reading "
        "before its stream is cut (it reconnects and fails over) (default 50000)",
    )
    p.add_argument(
        "--audit-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="append every operator's change (weights, quota, drains, kills, teardowns, ACL "
        "reloads; refused attempts too) as one JSON line: who, what, when, from where, the "
        "outcome (default: only as events, `agora cluster events --topic audit`)",
    )
    p.add_argument(
        "--max-request-mb",
        type=_megabytes,
        default=64,
        metavar="MB",
        help="the largest request of Accept, Reconcile and Acknowledge and of a stream's "
        "message; every other call takes at most 4 MB, refused before it is parsed "
        "(default 64)",
    )
    p.add_argument(
        "--max-calls-per-principal",
        type=int,
        default=64,
        metavar="N",
        help="calls one principal (a certificate's or a token's name) may have open at once; "
        "0: no bound (default 64)",
    )
    p.add_argument(
        "--max-streams-per-principal",
        type=int,
        default=256,
        metavar="N",
        help="streams (agents' links, subscriptions, relays) one principal may have open at "
        "once; 0: no bound, for an emulated fleet sharing one certificate (default 256)",
    )
    p.add_argument(
        "--max-completed-tasks-per-framework",
        type=int,
        default=1000,
        metavar="N",
        help="ended tasks remembered per framework, the oldest forgotten first (default 1000)",
    )
    p.add_argument(
        "--max-removed-frameworks",
        type=int,
        default=1000,
        metavar="N",
        help="torn-down frameworks remembered, with their ended tasks, in memory and in the "
        "registry; their ids are refused until forgotten (default 1000)",
    )
    p.add_argument(
        "--max-removed-agents",
        type=int,
        default=10_000,
        metavar="N",
        help="removed agents remembered in memory and in the registry; such an agent is told "
        "to register afresh (default 10000)",
    )
    p.add_argument("--role-sorter", default="drf", help="sorter among roles: drf or random")
    p.add_argument(
        "--framework-sorter",
        default="drf",
        help="sorter among frameworks within a role: drf or random",
    )
    p.add_argument(
        "--default-refuse-seconds",
        type=_seconds,
        default=5.0,
        metavar="SECONDS",
        help="filter for declined offers when the framework names none (default 5)",
    )
    p.add_argument(
        "--min-task-cpus",
        type=float,
        default=0.001,
        metavar="CPUS",
        help="every task must ask for at least this many cpus, so it is charged (default "
        "%(default)s; Mesos asks executors for 0.01)",
    )
    p.add_argument(
        "--min-task-mem",
        type=float,
        default=4.0,
        metavar="MB",
        help="every task must ask for at least this much memory, so it runs under a memory "
        "limit (default %(default)s; Mesos asks executors for 32)",
    )
    p.add_argument(
        "--http-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve the web dashboard at http://HOST:PORT/ (default: off; 0 picks a free port)",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off; 0 = any)",
    )
    p.add_argument(
        "--guarantee-preemption-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop tasks of roles above their share for a role that has waited this long "
        "below its quota guarantee with work it cannot place (default: never)",
    )
    p.add_argument(
        "--fair-share-preemption-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="the same for a role below its weighted fair share (default: never)",
    )
    p.add_argument(
        "--preemption-timeout",
        action="append",
        default=[],
        type=_role_seconds,
        metavar="ROLE=SECONDS",
        help="a role's own preemption timeout, over both above (repeat for several roles)",
    )
    p.add_argument(
        "--max-preemptions-per-minute",
        type=int,
        default=10,
        metavar="N",
        help="stop at most this many tasks a minute for preemption (default 10)",
    )
    p.add_argument(
        "--join-ca",
        type=Path,
        default=None,
        metavar="DIR",
        help="let machines join with a token (`agora tls join-token`): the CA directory made "
        "by `agora tls init`, whose key signs their certificates (default: no joins)",
    )
    p.add_argument(
        "--join-port",
        type=port_number,
        default=5052,
        metavar="PORT",
        help="where joining machines ask for their certificate, over TLS (default 5052)",
    )
    p.add_argument(
        "--join-cert-days",
        type=float,
        default=30.0,
        metavar="DAYS",
        help="validity of a joined machine's certificate; it renews it before then (default 30)",
    )
    p.add_argument(
        "--acls",
        type=Path,
        default=None,
        metavar="FILE",
        help="ACLs (YAML or JSON): which principals may register agents and frameworks, run "
        "tasks as which users, change weights and quota, drain agents, read the state; "
        "re-read on SIGHUP (default: everyone may do everything)",
    )
    add_daemon_tls_flags(p)
    add_log_flags(p)
    p.set_defaults(func=run, parser=p)


def _zk_masters(args: argparse.Namespace):
    """The --zk master set (None without --zk); bad combinations are usage errors (exit 2)."""
    from agora.common.masters import MasterSpecError, parse_masters

    if args.zk is None:
        for flag in ("zk_session_timeout", "advertise_ip"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} needs --zk")
        return None
    try:
        masters = parse_masters(args.zk)
    except MasterSpecError as e:
        raise UsageError(f"--zk {e}") from None
    if not masters.uses_zookeeper:
        raise UsageError(f"--zk {args.zk!r}: write zk://h1:2181,h2:2181/agora")
    if args.state_dir is not None:
        raise UsageError(
            "--state-dir and --zk: with --zk the registry is kept in ZooKeeper; drop --state-dir"
        )
    if args.zk_session_timeout is not None and args.zk_session_timeout <= 0:
        raise UsageError("--zk-session-timeout must be more than 0 seconds")
    return masters


def run(args: argparse.Namespace) -> int:
    from agora.common.runtime import tune_gc
    from agora.master import Master, MasterConfig

    config = MasterConfig(
        host=args.host,
        port=args.port,
        state_dir=args.state_dir,
        heartbeat_interval_seconds=args.heartbeat_interval,
        agent_timeout_seconds=args.agent_timeout,
        agent_removal_rate_limit=args.agent_removal_rate_limit,
        allocation_batch_seconds=args.allocation_batch,
        allocation_interval_seconds=args.allocation_interval,
        allocation_mode=args.allocation_mode,
        offer_mode=args.offer_mode,
        optimistic_fanout=args.optimistic_fanout,
        optimistic_grace_seconds=args.optimistic_grace,
        max_hold_seconds=args.max_hold,
        default_hold_seconds=min(60.0, args.max_hold),
        offer_timeout_seconds=args.offer_timeout or None,
        max_kill_grace_seconds=args.max_kill_grace,
        max_send_queue=args.max_send_queue,
        max_request_bytes=args.max_request_mb * 1024 * 1024,
        audit_log_path=args.audit_log,
        max_calls_per_principal=args.max_calls_per_principal,
        max_streams_per_principal=args.max_streams_per_principal,
        max_completed_tasks_per_framework=args.max_completed_tasks_per_framework,
        max_removed_frameworks=args.max_removed_frameworks,
        max_removed_agents=args.max_removed_agents,
        role_sorter=args.role_sorter,
        framework_sorter=args.framework_sorter,
        default_refuse_seconds=args.default_refuse_seconds,
        min_task_cpus=args.min_task_cpus,
        min_task_mem=args.min_task_mem,
        http_port=args.http_port,
        metrics_port=args.metrics_port,
        guarantee_preemption_timeout_seconds=args.guarantee_preemption_timeout,
        fair_share_preemption_timeout_seconds=args.fair_share_preemption_timeout,
        max_preemptions_per_minute=args.max_preemptions_per_minute,
        role_preemption_timeouts=dict(args.preemption_timeout),
        join_ca_dir=args.join_ca,
        join_port=args.join_port,
        join_cert_days=args.join_cert_days,
        credentials=daemon_credentials(args),
        insecure=args.insecure,
        acls_path=args.acls,
    )
    from agora.common.acls import AclError, load_acls

    zk = _zk_masters(args)
    try:
        config.validate()
        if zk is None:
            master = Master(config)
        elif config.acls_path is not None:
            load_acls(config.acls_path)  # a bad file fails now, not at election
    except AclError as e:  # one line naming the file and what is wrong, exit 2
        raise UsageError(str(e)) from None
    except ValueError as e:  # a bad flag value: argparse's exit 2, naming the flag
        args.parser.error(str(e).replace("_seconds", "").replace("_", "-"))
    setup_logging(args)
    tune_gc()
    if zk is not None:
        return asyncio.run(_serve_in_set(config, zk, args))
    return asyncio.run(_serve(master))


def restart_self(reason: str) -> None:
    """Steps down for good: replaces this process with a fresh `agora master` (same command
    line), which stands by again. Called on kazoo's thread the moment leadership is in doubt;
    exec ends every stream, offer and timer of this process at once (see master/leadership)."""
    restart_as_standby("master", reason)


async def _serve_in_set(config, zk, args) -> int:
    from agora.master.leadership import DEFAULT_SESSION_TIMEOUT, Leadership

    leadership = Leadership(
        config,
        zk,
        advertise_ip=args.advertise_ip,
        session_timeout=args.zk_session_timeout or DEFAULT_SESSION_TIMEOUT,
        on_deposed=restart_self,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    def listening() -> None:
        print(f"master standing by, listening on {leadership.address} ({zk})", flush=True)

    starting = leadership.start(
        on_waiting=lambda m: print(m, file=sys.stderr, flush=True), on_listening=listening
    )
    try:
        started = await start_unless_stopped(starting, stopping)  # Ctrl-C stops the wait
    except OSError as e:
        raise CommandError(f"cannot start: {e}") from None
    if not started:
        await leadership.stop()
        return 0
    if config.credentials.secure:
        import structlog

        from agora.common import handshakes

        log = structlog.get_logger("agora.master")

        def refused(reason: str, words: str) -> None:
            if leadership.master is not None:
                leadership.master.tls_handshake_refused(reason, words)
            else:  # standing by: nobody counts yet, but it is logged
                log.warning("TLS handshake refused", reason=reason, detail=words)

        handshakes.watch(refused)
    elected = asyncio.ensure_future(leadership.elected.wait())
    done, _ = await asyncio.wait(
        [elected, asyncio.ensure_future(stopping.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    if elected in done and leadership.master is not None:
        master = leadership.master
        loop.add_signal_handler(signal.SIGHUP, master.on_hangup)
        print(f"master leading on {leadership.address}", flush=True)
        if master.http_url is not None:
            print(f"dashboard on {master.http_url}/", flush=True)
        if master.metrics_url is not None:
            print(f"metrics on {master.metrics_url}/metrics", flush=True)
        await stopping.wait()
    elected.cancel()
    await leadership.stop()
    return 0


def _say_if_loopback(host: str) -> None:
    """One warning at start when only this machine can reach the master: an agent on another
    machine would otherwise meet "connection refused" with no hint why."""
    from agora.common.credentials import is_loopback

    if is_loopback(host):
        import structlog

        structlog.get_logger("agora.master").warning(
            f"listening on {host} only: agents on other machines cannot reach it; give --host "
            "ADDRESS (with TLS, or --insecure)"
        )


async def _serve(master) -> int:
    try:
        await master.start()
    except (OSError, RuntimeError) as e:
        raise CommandError(f"cannot start: {e}") from None
    if master.config.credentials.secure:
        from agora.common import handshakes

        handshakes.watch(master.tls_handshake_refused)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loop.add_signal_handler(signal.SIGHUP, master.on_hangup)
    print(f"master listening on {master.address}", flush=True)
    _say_if_loopback(master.config.host)
    if master.http_url is not None:
        print(f"dashboard on {master.http_url}/", flush=True)
    if master.metrics_url is not None:
        print(f"metrics on {master.metrics_url}/metrics", flush=True)
    if master.join_port is not None:
        print(f"joins on {master.config.host}:{master.join_port}", flush=True)
    await stopping.wait()
    await master.stop()
    return 0
