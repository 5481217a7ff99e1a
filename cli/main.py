"""Entry point of the `agora` command.

Each subcommand lives in its own module exposing `register(subparsers)`; the module is imported
only when listed here, so `agora --help` stays fast and one command's imports never slow another.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, summary) in the order `agora --help` lists them.
COMMAND_MODULES = [
    "cli.local_cmd",
    "cli.master_cmd",
    "cli.agent_cmd",
    "cli.cluster_cmd",
    "cli.bench_cmd",
    "cli.batch_cmd",
    "cli.job_cmd",
    "cli.services_cmd",
    "cli.app_cmd",
    "cli.experiment_cmd",
]


class CommandError(Exception):
    """A failure to report as one line on stderr with exit code 1 (no traceback)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agora",
        description="Agora: a two-level resource-offer cluster manager (in the line of Mesos).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as e:
        print(f"agora {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # `python -m cli.main` runs this file as __main__, a second copy of the module: delegate to
    # the real `cli.main`, whose CommandError is the one the commands raise.
    from cli.main import main as _main

    sys.exit(_main())
