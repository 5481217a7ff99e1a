"""`agora batch`: the batch framework daemon (jobs queued, placed on offers, retried)."""

from __future__ import annotations

import argparse
import asyncio

from agora.cli.framework_daemon import add_daemon_flags, serve
from agora.cli.options import add_log_flags, daemon_credentials, duration, setup_logging


def register(subparsers: argparse._SubParsersAction) -> None:
    from agora.frameworks.batch.queue import POLICIES
    from agora.frameworks.batch.refusals import (
        DECLINE_REFUSE_SECONDS,
        IDLE_REFUSE_SECONDS,
        UNFIT_REFUSE_SECONDS,
    )

    parser = subparsers.add_parser(
        "batch",
        help="run the batch framework daemon (the API behind `agora job`)",
        description=(
            "Subscribes to the master as framework 'batch' and serves the Batch gRPC API, "
            "whose address it publishes to the master so that `agora job` needs only "
            "--master. Jobs are kept in SQLite under --state-dir: restart the daemon with the "
            "same dir and it takes its running jobs back."
        ),
    )
    add_daemon_flags(
        parser, api="Batch", state_dir="agora-batch", state_help="jobs and the framework id"
    )
    parser.add_argument(
        "--queue",
        default="fifo",
        choices=sorted(POLICIES),
        help="queue order: fifo (submission order), priority (highest --priority first) or "
        "sjf (shortest declared duration first) (default: %(default)s)",
    )
    parser.add_argument(
        "--retry-backoff",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="wait before the first retry of a failed instance; doubles each time, up to 60 s "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--gang-hold",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="a gang job that does not fit one round of offers asks the master to hold "
        "resources for it as they free up, for at most this long, so a stream of small jobs "
        "cannot starve it; 0 = never (default: %(default)s)",
    )
    parser.add_argument(
        "--decline-refuse",
        type=_seconds,
        default=DECLINE_REFUSE_SECONDS,
        metavar="SECONDS",
        help="while work waits, offers it cannot use (and what a launch leaves of an offer) "
        "are refused for this long; the master still offers them again at once when anything "
        "frees up on that agent, and new work (a submission, a retry due) revives, so a longer "
        "refusal only spares the master the same unusable offer (default: %(default)s)",
    )
    parser.add_argument(
        "--unfit-refuse",
        type=_seconds,
        default=UNFIT_REFUSE_SECONDS,
        metavar="SECONDS",
        help="while work waits, offers too small for every waiting instance are refused for "
        "this long: only new work (which revives) or more room on that agent (offered at "
        "once) can make them of use (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-refuse",
        type=_seconds,
        default=IDLE_REFUSE_SECONDS,
        metavar="SECONDS",
        help="offers refused when nothing waits; the framework also suppresses its offers "
        "then, so this only bounds what a revive lost on the way costs (default: %(default)s)",
    )
    parser.add_argument(
        "--max-finished-jobs",
        type=_count,
        default=10_000,
        metavar="N",
        help="finished jobs remembered (listed, their logs found), the oldest forgotten first "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--keep-finished-for",
        type=duration,
        default=30 * 24 * 3600.0,
        metavar="DURATION",
        help="finished jobs are forgotten this long after they ended (and past "
        "--max-finished-jobs), e.g. 7d; 0: only the count bounds them (default: 30d)",
    )
    add_log_flags(parser)
    parser.set_defaults(func=run)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def run(args: argparse.Namespace) -> int:
    from agora.frameworks.batch import BatchConfig, BatchDaemon

    setup_logging(args)
    config = BatchConfig(
        master=args.master,
        host=args.host,
        port=args.port,
        state_dir=args.state_dir,
        queue=args.queue,
        role=args.role,
        advertise_host=args.advertise_host,
        credentials=daemon_credentials(args, args.state_dir / "tls"),
        insecure=args.insecure,
        metrics_port=args.metrics_port,
        acls_path=args.acls,
        user=args.user,
        retry_backoff_seconds=args.retry_backoff,
        retry_backoff_max_seconds=max(60.0, args.retry_backoff),
        max_finished_jobs=args.max_finished_jobs,
        keep_finished_seconds=args.keep_finished_for,
        gang_hold_seconds=args.gang_hold,
        decline_refuse_seconds=args.decline_refuse,
        unfit_refuse_seconds=args.unfit_refuse,
        idle_refuse_seconds=args.idle_refuse,
    )
    return asyncio.run(serve("batch", BatchDaemon, config, args.zk, args.zk_session_timeout))
