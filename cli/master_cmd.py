"""`agora master`: the master daemon."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from agora.cli.errors import CommandError, UsageError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_log_flags,
    daemon_credentials,
    duration,
    restart_as_standby,
    setup_logging,
    start_unless_stopped,
)
from agora.common.settings import add_flags, flag_settings, in_flag_words
from agora.master.config import MasterConfig


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
    add_flags(p, MasterConfig)  # each declared once, in MasterConfig's field metadata
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
        type=duration,
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
    from agora.master import Master

    config = MasterConfig(
        **flag_settings(args, MasterConfig),
        default_hold_seconds=min(MasterConfig.default_hold_seconds, args.max_hold),
        credentials=daemon_credentials(args),
        insecure=args.insecure,
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
        args.parser.error(in_flag_words(str(e), MasterConfig))
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
