"""Entry point of the `agora` command.

Each subcommand lives in its own module exposing `register(subparsers)`; the module is imported
only when listed here, so `agora --help` stays fast and one command's imports never slow another.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from agora.cli.errors import CommandError, UsageError

# (module, summary) in the order `agora --help` lists them.
COMMAND_MODULES = [
    "agora.cli.local_cmd",
    "agora.cli.master_cmd",
    "agora.cli.agent_cmd",
    "agora.cli.relay_cmd",
    "agora.cli.cluster_cmd",
    "agora.cli.bench_cmd",
    "agora.cli.batch_cmd",
    "agora.cli.job_cmd",
    "agora.cli.services_cmd",
    "agora.cli.app_cmd",
    "agora.cli.task_cmd",
    "agora.cli.experiment_cmd",
    "agora.cli.tls_cmd",
]


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


# Long-running daemons, which watch gRPC's core for refused TLS handshakes (common/handshakes).
DAEMONS = {"master", "agent", "relay", "batch", "services"}


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in DAEMONS and any(w.startswith("--tls-cert") for w in words):
        from agora.common import handshakes

        handshakes.prepare()  # before anything imports grpc
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as e:
        print(f"agora {args.command}: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`agora cluster tasks | head -1`): stop quietly, as `cat` does.
        # Python's own flush of stdout at exit would fail again: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a writer cut off by a pipe


if __name__ == "__main__":
    sys.exit(main())
