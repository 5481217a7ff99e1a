"""Flags and helpers every `agora` subcommand shares."""

from __future__ import annotations

import argparse
import os

from agora.common import configure_logging

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
    configure_logging(level=args.log_level, fmt=args.log_format, final=True)


def add_master_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        default=os.environ.get("AGORA_MASTER", DEFAULT_MASTER),
        help="master address HOST:PORT (default $AGORA_MASTER or 127.0.0.1:5050)",
    )


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def port_number(text: str) -> int:
    """argparse type for a TCP port to listen on: 0-65535, 0 picking a free one."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port
