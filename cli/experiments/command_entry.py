"""`python -m cli.experiments.command_entry MODULE ARGS...`: one `agora` subcommand on its own.

`agora` imports every module in COMMAND_MODULES to build its parser, so one module that is
missing (still being written) breaks every command; the experiments then start the daemons they
need (e.g. `cli.agent_cmd`) through this shim instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cli.main import CommandError


def main(argv: list[str]) -> int:
    module, args = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog="agora")
    subparsers = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(subparsers)
    parsed = parser.parse_args(args)
    try:
        return int(parsed.func(parsed) or 0)
    except CommandError as e:
        print(f"agora {parsed.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
