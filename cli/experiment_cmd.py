"""`agora experiment NAME [options] --out DIR`: the experiments of agora.experiments.catalog."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from agora.cli.errors import CommandError
from agora.cli.options import add_log_flags, setup_logging

if TYPE_CHECKING:  # the experiments (and matplotlib) load only when one runs
    from agora.experiments.results import Results


def register(subparsers) -> None:
    from agora.experiments.catalog import EXPERIMENTS, add_common_arguments

    parser = subparsers.add_parser(
        "experiment",
        help="measure the real master against emulated agents (results + plots)",
        description="Runs an experiment against a real master process with emulated agents "
        "(and, for launch --real-agents, real agents) and load frameworks timed "
        "from inside their process; writes DIR/results.json, DIR/samples.csv, PNG "
        "plots and DIR/summary.md. See docs/experiments.md.",
    )
    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    sub.required = True
    for experiment in EXPERIMENTS.values():
        p = sub.add_parser(
            experiment.name, help=experiment.help, description=experiment.description
        )
        experiment.add_arguments(p)
        add_common_arguments(p)
        add_log_flags(p)
        p.set_defaults(func=_run, log_level="error")


class _Terminated(Exception):
    """The run was told to stop with SIGTERM."""


async def _run_and_clean_up(run: Coroutine[Any, Any, Results]) -> Results:
    """Runs the experiment; SIGTERM cancels it as asyncio.run does on Ctrl-C. A cancellation
    is delivered at an await, where asyncio cleans up (a process being started is killed),
    whereas an exception raised by a plain signal handler can land anywhere, even between a
    fork and the bookkeeping that would have stopped that child."""
    from agora.experiments.processes import stop_all

    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        if not terminated:  # once: a second would cut short the clean-up the first set off
            terminated = True
            main.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        results = await run
    except asyncio.CancelledError:
        if terminated:
            raise _Terminated from None
        raise
    finally:
        # From here a SIGTERM finds the run over: the clean-up is bounded and must finish.
        loop.add_signal_handler(signal.SIGTERM, lambda: None)
        await stop_all()
    if terminated:  # the run swallowed the cancellation: it was stopped all the same
        raise _Terminated
    return results


def _run(args: argparse.Namespace) -> int:
    from agora.experiments.catalog import EXPERIMENTS, ExperimentError

    setup_logging(args)
    if importlib.util.find_spec("matplotlib") is None:
        # Plotting is an optional extra, so agents and frameworks never install a plot stack.
        raise CommandError(
            "the experiments draw plots with matplotlib: pip install 'agora[experiments]'"
        )
    argv = sys.argv[1:]
    command = (
        ["agora", *argv[argv.index("experiment") :]]
        if "experiment" in argv
        else ["agora", "experiment", args.experiment]
    )
    try:
        runner = EXPERIMENTS[args.experiment].build(args)
    except ExperimentError as e:
        raise CommandError(str(e)) from None
    from agora.experiments.processes import stop_all_now

    # SIGTERM ends a run as Ctrl-C does: the experiment's own clean-up runs, then every
    # daemon it started and did not stop, and every process still a child of this one (with
    # their children), is stopped before it exits (experiments/processes.py).
    try:
        results = asyncio.run(_run_and_clean_up(runner(args.out, command)))
    except _Terminated:
        print(f"agora experiment {args.experiment}: stopped (SIGTERM)", file=sys.stderr)
        return 143  # 128 + SIGTERM, as a shell reports it
    finally:
        # The loop is closed and SIGTERM's default would end this process mid-sweep,
        # before the SIGKILLs; the sweep is bounded (twice its grace at most).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_all_now(descendants=True)
    print(
        f"{args.experiment}: wrote {args.out / 'results.json'}, {args.out / 'summary.md'} "
        f"and {len(results.data.get('plots', []))} plot(s)",
        flush=True,
    )
    from agora.experiments.results import target_line

    for target in results.data["targets"]:
        # A target the run did not measure is a sentence saying so, not "None ms".
        print(f"  {target_line(target)}", flush=True)
    return 0
