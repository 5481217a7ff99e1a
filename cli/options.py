"""Flags and helpers every `agora` subcommand shares."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agora.cli.errors import CommandError, UsageError
from agora.common.durations import DurationError, parse_duration

DEFAULT_MASTER = "127.0.0.1:5050"


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity (default info)",
    )
    parser.add_argument(
        "--log-format",
        default="console",
        choices=["console", "json"],
        help="console lines for people, or one JSON object per line (default console)",
    )


def setup_logging(args: argparse.Namespace) -> None:
    from agora.common.logs import configure_logging

    configure_logging(level=args.log_level, fmt=args.log_format, final=True)


def add_master_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        default=os.environ.get("AGORA_MASTER", DEFAULT_MASTER),
        help="the master: HOST:PORT, a set h1:5050,h2:5050,h3:5050, or zk://h1:2181/agora "
        "(the leader is found and followed; default $AGORA_MASTER or 127.0.0.1:5050)",
    )
    add_tls_flags(parser, env=True)


def master_spec(text: str) -> str:
    """An argparse type: a daemon's --master (HOST:PORT, a set, or zk://), checked at once."""
    from agora.common.masters import MasterSpecError, parse_masters

    try:
        parse_masters(text)
    except MasterSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def one_line_errors(parser: argparse.ArgumentParser, command: str) -> None:
    """A bad flag value is one line naming the flag and what to write, not a usage dump."""

    def error(message: str):
        parser.exit(2, f"agora {command}: error: {message} (see agora {command} --help)\n")

    parser.error = error  # type: ignore[method-assign]


def master_address(args: argparse.Namespace) -> str:
    """The leading master's host:port, from --master in any form (one address, a list, or
    zk://): a standby's refusal names the leader. Found once per command."""
    from agora.common.leader import LeaderNotFound, find_leader
    from agora.common.masters import MasterSpecError, parse_masters

    cached = getattr(args, "_leader", None)
    if cached:
        return cached
    try:
        masters = parse_masters(args.master)
    except MasterSpecError as e:
        raise UsageError(f"--master {e}") from None
    try:
        leader = find_leader(masters, credentials_from(args), timeout=getattr(args, "timeout", 10))
    except LeaderNotFound as e:
        raise CommandError(f"{e} (set --master or $AGORA_MASTER)") from None
    args._leader = leader
    return leader


def add_tls_flags(parser: argparse.ArgumentParser, env: bool = False) -> None:
    """--tls-ca, --tls-cert, --tls-key: mutual TLS (files made by `agora tls`). A client
    command also reads AGORA_TLS_CA, AGORA_TLS_CERT and AGORA_TLS_KEY."""
    group = parser.add_argument_group("mutual TLS (see `agora tls`)")
    for flag, what in (
        ("ca", "the cluster's CA certificate"),
        ("cert", "this side's certificate"),
        ("key", "that certificate's key"),
    ):
        var = f"AGORA_TLS_{flag.upper()}"
        group.add_argument(
            f"--tls-{flag}",
            default=os.environ.get(var) if env else None,
            metavar="FILE",
            help=f"{what} (PEM)" + (f"; default ${var}" if env else ""),
        )
    group.add_argument(
        "--token-file",
        default=os.environ.get("AGORA_TOKEN_FILE") if env else None,
        metavar="FILE",
        help="a bearer token to present instead of a certificate (made by `agora tls token`; "
        "mode 0600; never give a token itself on the command line)"
        + ("; default $AGORA_TOKEN_FILE" if env else ""),
    )


def add_insecure_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="listen beyond loopback without TLS (anyone who reaches the port can use it)",
    )


def daemon_credentials(args: argparse.Namespace, tls_dir: Path | None = None):
    """A daemon's Credentials from its --tls-* flags, or from the files a join wrote in
    `tls_dir` (--join, joining first if there are none); a bad file is a usage error (exit 2)."""
    joined_dir = None
    if getattr(args, "join", None) is not None:
        joined_dir = args.tls_dir or tls_dir
        _join(args, joined_dir)
    try:
        credentials = credentials_from(args)
    except CommandError as e:
        raise UsageError(str(e)) from None
    if joined_dir is None:
        return credentials
    import dataclasses

    from agora.common.credentials import RenewableCertificate

    # A joined machine renews its certificate itself (common/renewal.py).
    assert credentials.cert is not None and credentials.key is not None
    renewable = RenewableCertificate(
        credentials.cert, credentials.key, Path(joined_dir), args.join_addresses
    )
    return dataclasses.replace(credentials, renewable=renewable)


def add_join_flags(parser: argparse.ArgumentParser, tls_dir_default: str) -> None:
    """--join FILE and what goes with it, for the daemons that run on the machines."""
    group = parser.add_argument_group("joining with a token (see `agora tls join-token`)")
    group.add_argument(
        "--join",
        type=Path,
        default=None,
        metavar="FILE",
        help="join the cluster with the token in FILE: make this machine's key, have the "
        "master sign its certificate, and keep both in --tls-dir (a restart uses them and "
        "needs no token)",
    )
    group.add_argument(
        "--join-address",
        default=None,
        metavar="HOST:PORT",
        help="the master's join port (default: the --master host, port 5052)",
    )
    group.add_argument(
        "--tls-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where a join keeps the CA, certificate and key (default: {tls_dir_default})",
    )


def _join(args: argparse.Namespace, tls_dir: Path | None) -> None:
    from agora.common.joining import JoinError, ensure_joined, join_address

    if args.tls_ca or args.tls_cert or args.tls_key:
        raise UsageError("--join writes the TLS files itself: give it without --tls-ca/cert/key")
    assert tls_dir is not None
    try:
        addresses = join_address(args.master, args.join_address)
        args.join_addresses = addresses  # where it renews, later
        joined = ensure_joined(tls_dir, args.join, addresses)
    except JoinError as e:
        raise CommandError(str(e)) from None
    args.tls_ca, args.tls_cert, args.tls_key = map(str, (joined.ca, joined.cert, joined.key))
    if joined.fresh:
        print(
            f"joined as {joined.principal}: certificate and key in {tls_dir}",
            file=sys.stderr,
            flush=True,
        )


def add_daemon_tls_flags(parser: argparse.ArgumentParser) -> None:
    add_tls_flags(parser)
    parser.add_argument(
        "--tokens",
        default=None,
        metavar="FILE",
        help="accept bearer tokens: a YAML file of 'principal: sha256:HEX' lines (`agora tls "
        "token` prints them). Every caller must then present a token; over TLS no client "
        "certificate is asked for (default: certificates only)",
    )
    add_insecure_flag(parser)


def credentials_from(args: argparse.Namespace):
    """The Credentials the --tls-* flags name; a bad file is a one-line error."""
    from agora.common.credentials import Credentials, CredentialsError

    try:
        return Credentials.load(
            args.tls_ca,
            args.tls_cert,
            args.tls_key,
            getattr(args, "token_file", None),
            getattr(args, "tokens", None),
        )
    except CredentialsError as e:
        raise CommandError(str(e)) from None


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def duration(text: str) -> float:
    """Seconds from `90`, `90s`, `10m`, `1h30m` or `2d` (argparse type)."""
    try:
        return parse_duration(text)
    except DurationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def port_number(text: str) -> int:
    """argparse type for a TCP port to listen on: 0-65535, 0 picking a free one."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port


def warn_unnamed_address(cert_pem: bytes | None, address: str, command: str) -> None:
    """Says at start, where it is fixed, what every client would otherwise meet later: a
    certificate that does not name the address this daemon gives out."""
    import structlog

    from agora.common.certificates import unnamed_address

    why = unnamed_address(cert_pem, address, command) if cert_pem else None
    if why:
        structlog.get_logger(__name__).warning(why, address=address)


def restart_as_standby(who: str, reason: str) -> None:
    """Steps down for good: replaces this process with a fresh one (the same command line),
    which stands by again. Called, on any thread, the moment a leader of a set (a master, a
    batch or services daemon) can no longer prove it leads: exec ends every stream, timer and
    call of this process at once, which nothing short of it could promise."""
    print(f"{who} stepping down ({reason}); restarting as a standby", file=sys.stderr, flush=True)
    try:
        sys.stdout.flush()
        from agora.common import handshakes

        handshakes.restore()  # the filter thread does not survive the exec
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    finally:
        # exec failed (or flushing did): stop acting all the same; a supervisor restarts us.
        os._exit(75)


async def start_unless_stopped(starting, stopping) -> bool:
    """Waits for `starting` (a daemon of a set connecting to ZooKeeper, for ever while it is
    unreachable) unless `stopping` (SIGTERM, Ctrl-C) is set first; then cancels it and returns
    False. True once started; `starting`'s exception, if any, is raised."""
    import asyncio

    task = asyncio.ensure_future(starting)
    stop = asyncio.ensure_future(stopping.wait())
    await asyncio.wait([task, stop], return_when="FIRST_COMPLETED")
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    stop.cancel()
    task.result()
    return True
