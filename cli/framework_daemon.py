"""What `agora batch` and `agora services` share: the daemon flags and serving until a signal."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agora.cli.errors import CommandError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_join_flags,
    port_number,
    restart_as_standby,
    start_unless_stopped,
    warn_unnamed_address,
)


def add_daemon_flags(
    parser: argparse.ArgumentParser, *, api: str, state_dir: str, state_help: str
) -> None:
    """--master, --host, --port, --advertise-host, --state-dir, --role, --acls and --user of
    a framework daemon serving the `api` gRPC API, its state kept under ./`state_dir` by
    default."""
    parser.add_argument(
        "--master",
        required=True,
        metavar="HOST:PORT",
        help="address of the master, e.g. 127.0.0.1:5050",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"interface for the {api} API; 0.0.0.0 for all (default: %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=0,
        help=f"port for the {api} API; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--advertise-host",
        default=None,
        metavar="HOST",
        help="host name or IP published to clients (default: --host)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(state_dir),
        metavar="DIR",
        help=f"where {state_help} are stored (default: ./{state_dir})",
    )
    parser.add_argument(
        "--role", default="*", help="role the framework is allocated under (default: *)"
    )
    parser.add_argument(
        "--acls",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"ACL file (the master's format; re-read on SIGHUP) saying who may use the {api} "
        "API: submit_jobs, manage_apps (default: anyone who may connect)",
    )
    parser.add_argument(
        "--user",
        default=None,
        metavar="NAME",
        help="Unix user the tasks run as unless they name one (default: the user running "
        "this daemon; the master's run_tasks ACL must allow it)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off; 0 = any)",
    )
    parser.add_argument(
        "--zk",
        default=None,
        metavar="zk://HOST:PORT[,HOST:PORT...]/PATH",
        help="run as one of a highly available set of 2 or 3 daemons on ZooKeeper: one leads "
        "(elected under PATH), the others stand by and send clients to it; the state lives in "
        "ZooKeeper under PATH instead of --state-dir, so a new leader on another machine "
        f"takes over the {api} API and the running tasks; e.g. zk://h1:2181,h2:2181/agora-"
        f"{state_dir.removeprefix('agora-')}",
    )
    parser.add_argument(
        "--zk-session-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="with --zk: a leader that dies is replaced this long after, and one that hears "
        "nothing from ZooKeeper for 0.8 of it steps down (default 1.5)",
    )
    add_daemon_tls_flags(parser)
    add_join_flags(parser, "STATE_DIR/tls")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


async def serve(
    kind: str,
    make_daemon: Callable[[Any], Any],
    config: Any,
    zk: str | None = None,
    zk_session_timeout: float | None = None,
) -> int:
    """Starts the daemon, prints "KIND listening on HOST:PORT ..." once it serves (what
    tests/harness.py waits for), and stops it on SIGTERM or SIGINT. With `zk`, it is one of a
    highly available set: it prints "KIND standing by ..." and serves once elected."""
    if zk is not None:
        return await _serve_in_set(kind, make_daemon, config, zk, zk_session_timeout)
    try:
        daemon = make_daemon(config)
        await daemon.start()
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot start the {kind} daemon: {e}") from None
    if daemon.credentials.secure:
        from agora.common import handshakes

        handshakes.watch(daemon.tls_handshake_refused)
        warn_unnamed_address(daemon.credentials.cert, daemon.service_address, f"agora {kind}")
    renewing = None
    if daemon.credentials.renewable is not None and daemon.credentials.renewable.addresses:
        from agora.common.renewal import renew_forever

        renewing = asyncio.create_task(renew_forever(daemon.credentials), name="renewal")
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loop.add_signal_handler(signal.SIGHUP, daemon.on_hangup)
    print(
        f"{kind} listening on {daemon.address} (master {config.master}, "
        f"state dir {os.path.abspath(config.state_dir)})",
        flush=True,
    )
    if daemon.metrics_url is not None:
        print(f"{kind} metrics on {daemon.metrics_url}/metrics", flush=True)
    await stopping.wait()
    if renewing is not None:
        renewing.cancel()
    await daemon.stop()
    return 0


async def _serve_in_set(
    kind: str, make_daemon: Callable[[Any], Any], config: Any, zk: str, session: float | None
) -> int:
    from agora.frameworks.sdk.leadership import DEFAULT_SESSION_TIMEOUT, DaemonLeadership

    try:
        daemon = make_daemon(config)
        leadership = DaemonLeadership(
            daemon,
            zk,
            session_timeout=session or DEFAULT_SESSION_TIMEOUT,
            on_deposed=lambda reason: restart_as_standby(f"{kind} daemon", reason),
        )
    except ValueError as e:
        raise CommandError(f"cannot start the {kind} daemon: {e}") from None
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    loop.add_signal_handler(signal.SIGHUP, daemon.on_hangup)
    starting = leadership.start(on_waiting=lambda m: print(m, file=sys.stderr, flush=True))
    try:
        started = await start_unless_stopped(starting, stopping)
    except Exception as e:  # noqa: BLE001 - the port, ZooKeeper: one line, not a traceback
        await leadership.stop()
        raise CommandError(f"cannot start the {kind} daemon: {e}") from None
    if not started:
        await leadership.stop()
        return 0
    print(f"{kind} standing by, listening on {leadership.address} ({zk})", flush=True)
    elected = asyncio.ensure_future(leadership.leading.wait())
    await asyncio.wait(
        [elected, asyncio.ensure_future(stopping.wait())], return_when="FIRST_COMPLETED"
    )
    if elected.done():
        print(f"{kind} leading, listening on {daemon.address} (master {config.master})", flush=True)
    await stopping.wait()
    await leadership.stop()
    return 0
