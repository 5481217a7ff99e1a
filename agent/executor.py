"""`python -m agora.agent.executor`: the command line of the fork server and of the one-shot
wrapper (agent/spawners.py's second and third routes).

    python -m agora.agent.executor --serve [--native WRAPPER]   agent/fork_server_process.py
    python -m agora.agent.executor RUN_DIR                      agent/python_wrapper.py

The code lives in those modules; this name stays on the command line because operators' `ps`
filters and the experiments' CPU accounting (experiments/processes.py, launcher_pids) find the
fork server by it.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--serve":
        return _serve(None)
    if len(argv) == 4 and argv[1] == "--serve" and argv[2] == "--native":
        return _serve(argv[3])
    if len(argv) != 2:
        print(
            "usage: python -m agora.agent.executor RUN_DIR | --serve [--native WRAPPER]",
            file=sys.stderr,
        )
        return 2
    from agora.agent.python_wrapper import run_one_shot

    return run_one_shot(Path(argv[1]))


def _serve(c_wrapper: str | None) -> int:
    from agora.agent.fork_server_process import serve

    return serve(c_wrapper)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
