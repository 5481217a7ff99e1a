"""Entry point of the `agora` command.

Each subcommand lives in its own module exposing `register(subparsers)`. The table below names
every command and its one-line summary, so `agora --help` lists them all without importing any,
and `agora job submit ...` imports only agora.cli.job_cmd: one command's imports never slow
another, and `agora --help` takes about as long as Python takes to start.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from agora.cli.errors import CommandError, UsageError

# name -> (module, summary), in the order `agora --help` lists them. A summary is the `help=`
# its module registers (tests/cli checks that they agree).
COMMANDS: dict[str, tuple[str, str]] = {
    "local": (
        "agora.cli.local_cmd",
        "run a master and agents in one process (a cluster on this machine)",
    ),
    "master": ("agora.cli.master_cmd", "run the master daemon"),
    "agent": (
        "agora.cli.agent_cmd",
        "run an agent: offer this machine's resources to a master and run its tasks",
    ),
    "relay": (
        "agora.cli.relay_cmd",
        "run a relay: agents dial it as a master, and it carries them all on one stream",
    ),
    "cluster": ("agora.cli.cluster_cmd", "show the live cluster; set role weights and quota"),
    "bench": ("agora.cli.bench_cmd", "benchmark a component (allocator, streams, tasks, hops)"),
    "batch": (
        "agora.cli.batch_cmd",
        "run the batch framework daemon (the API behind `agora job`)",
    ),
    "job": ("agora.cli.job_cmd", "submit and manage batch jobs (needs `agora batch` running)"),
    "services": (
        "agora.cli.services_cmd",
        "run the service framework daemon (the API behind `agora app`)",
    ),
    "app": ("agora.cli.app_cmd", "manage long-running apps on the service framework"),
    "task": ("agora.cli.task_cmd", "read any framework's task output"),
    "experiment": (
        "agora.cli.experiment_cmd",
        "measure the real master against emulated agents (results + plots)",
    ),
    "tls": (
        "agora.cli.tls_cmd",
        "create a certificate authority and certificates for mutual TLS",
    ),
}
COMMAND_MODULES = [module for module, _ in COMMANDS.values()]


def chosen_command(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (`agora` itself takes
    only -h), or None when it names none of COMMANDS."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `agora` parser with the command `argv` names registered in full (its module
    imported); every other command is a name and a summary, enough for `agora --help`."""
    parser = argparse.ArgumentParser(
        prog="agora",
        description="Agora: a two-level resource-offer cluster manager (in the line of Mesos).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    command = chosen_command(sys.argv[1:] if argv is None else argv)
    for name, (module, summary) in COMMANDS.items():
        if name == command:
            register = importlib.import_module(module).register
            if getattr(register, "builds_chosen_action", False):  # lazy_actions.py
                register(subparsers, sys.argv[1:] if argv is None else argv)
            else:
                register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


# Long-running daemons, which watch gRPC's core for refused TLS handshakes (common/handshakes).
DAEMONS = {"master", "agent", "relay", "batch", "services"}


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in DAEMONS and any(w.startswith("--tls-cert") for w in words):
        from agora.common import handshakes

        handshakes.prepare()  # before anything imports grpc
    parser = build_parser(words)
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
    except Exception as e:
        failure = _rpc_failure(e, args)
        if failure is None:
            raise
        print(f"agora {args.command}: {failure}", file=sys.stderr)
        return 1


def _rpc_failure(error: Exception, args: argparse.Namespace) -> str | None:
    """A gRPC error a command left uncaught, as one line naming its cause (agora.common.
    failures) instead of a traceback; None for any other exception."""
    grpc = sys.modules.get("grpc")  # not loaded: it cannot be a gRPC error
    if grpc is None or not isinstance(error, grpc.RpcError) or not hasattr(error, "code"):
        return None
    from agora.cli.options import credentials_from
    from agora.common.credentials import INSECURE
    from agora.common.failures import classify_error

    address = getattr(args, "_leader", None) or getattr(args, "master", None) or "?"
    try:
        credentials = credentials_from(args)
    except Exception:  # noqa: BLE001 - a command without TLS flags: the cause still reads
        credentials = INSECURE
    return classify_error(error, str(address), credentials).message


if __name__ == "__main__":
    sys.exit(main())
