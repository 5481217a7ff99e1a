"""Experiments, by name: each one's command-line arguments, its runner, and its sizes.

`agora experiment NAME` (agora.cli.experiment_cmd) and `make experiments`
(agora.experiments.report) both read this catalog, so an experiment's arguments, defaults
and documented size are written once. Adding an experiment is one `Experiment` entry here.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora.common.arguments import whole_number

if TYPE_CHECKING:  # imported by each experiment when it runs
    from agora.experiments.results import Results

__all__ = ["EXPERIMENTS", "Experiment", "ExperimentError", "parse"]

# A runner: (out dir, the command line to record) -> Results.
Runner = Callable[[Path, list[str]], Coroutine[Any, Any, "Results"]]


class ExperimentError(ValueError):
    """Arguments that cannot make a run; the message names the flag and what to write."""


@dataclass(frozen=True)
class Experiment:
    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    build: Callable[[argparse.Namespace], Runner]
    # The documented full-size run (`make experiments`) and a quick one (`--quick`), as
    # `agora experiment NAME` arguments.
    full: tuple[str, ...]
    quick: tuple[str, ...]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write whole numbers, e.g. 10,100,1000"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more numbers >= 1")
    return values


def _counts(text: str) -> list[int]:
    """Like _ints, but 0 is a count too (none)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write whole numbers, e.g. 0,5") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more numbers >= 0")
    return values


def _tls_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes or set(modes) - {"off", "on"}:
        raise ExperimentError(f"--tls {text!r}: use off, on or off,on")
    return modes


_count = whole_number(0)


def _positive(text: str) -> float:
    try:
        value = float(text.rstrip("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def _offer_latency_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--agents",
        type=_ints,
        default=[10, 100, 1000],
        help="emulated agent counts to sweep (default 10,100,1000)",
    )
    p.add_argument(
        "--frameworks", type=_ints, default=[1, 10], help="framework counts to sweep (default 1,10)"
    )
    p.add_argument(
        "--grid",
        choices=["cross", "full"],
        default="cross",
        help="cross: agents at a fixed framework count and frameworks at a fixed "
        "agent count (default); full: every combination",
    )
    p.add_argument(
        "--fixed-agents",
        type=int,
        default=1000,
        help="agent count of the frameworks sweep (default 1000)",
    )
    p.add_argument(
        "--fixed-frameworks",
        type=int,
        default=10,
        help="framework count of the agents sweep (default 10)",
    )
    p.add_argument(
        "--allocation-interval",
        type=_positive,
        default=1.0,
        help="period of the Mesos-style interval runs, seconds (default 1)",
    )
    p.add_argument(
        "--allocation-batch",
        type=float,
        default=None,
        help="the master's event batching window, seconds (default: its own, 0.002)",
    )
    p.add_argument(
        "--modes",
        default="event,interval",
        help="event (Agora), interval (Mesos' timer) or both (default event,interval)",
    )
    p.add_argument(
        "--rate",
        type=_positive,
        default=40.0,
        help="tasks ending per second over the cluster (default 40)",
    )
    p.add_argument(
        "--mean-duration",
        type=_positive,
        default=1.0,
        help="mean task duration, exponential (default 1 s)",
    )
    p.add_argument(
        "--decline-fraction",
        type=_fraction,
        default=0.05,
        help="offers declined with refuse_seconds=0 to time re-offers (default 0.05)",
    )
    p.add_argument(
        "--tls",
        default="off",
        help="off (plaintext), on (mutual TLS on every connection, certificates made for the "
        "run) or off,on: each configuration runs both ways, back to back (default off)",
    )
    p.add_argument(
        "--dashboard-viewers",
        type=_counts,
        default=[0],
        help="people polling the master's dashboard during a run, a run per count "
        "(default 0: no dashboard; e.g. 0,5 to compare; each polls every page every 2 s)",
    )
    p.add_argument(
        "--decision-delay",
        type=float,
        default=0.0,
        help="seconds each framework takes to answer an offer (default 0)",
    )
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="CSV trace (submit_time,duration,cpus,mem) dealt out to the frameworks instead "
        "of the closed loop",
    )
    p.add_argument(
        "--joiners", type=int, default=5, help="agents that join during each window (default 5)"
    )
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring (3)")


def _launch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agents", type=int, default=10, help="emulated agents (default 10)")
    p.add_argument(
        "--tls",
        default="off",
        help="off (plaintext), on (mutual TLS on every connection, certificates made for the "
        "run) or off,on: a run each, back to back, compared in the summary (default off)",
    )
    p.add_argument(
        "--real-agents",
        type=int,
        default=0,
        help="use N real `agora agent` processes instead of emulated agents",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="tasks the framework keeps in flight (default 32)",
    )
    p.add_argument(
        "--tasks-per-accept",
        type=_count,
        default=0,
        metavar="N",
        help="launch at most N tasks an Accept (default 0: as many as the offers and the "
        "concurrency allow); 1 makes every task pay a whole offer -> Accept cycle, to measure it",
    )
    p.add_argument(
        "--spawn-seconds",
        type=_positive,
        default=3.0,
        help="how long to measure the raw spawn rate (default 3 s)",
    )
    p.add_argument(
        "--latency-seconds",
        type=_positive,
        default=4.0,
        help="one-task-at-a-time phase for accept -> RUNNING (default 4 s)",
    )
    p.add_argument(
        "--warmup", type=float, default=2.0, help="seconds before each measured phase (default 2)"
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="put the real agents' work dirs (sandboxes, checkpoints) under DIR; the run "
        "reports how fast DIR creates files, which the per-task cost depends on "
        "(default: $TMPDIR or /tmp)",
    )


def _scale_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--agents",
        type=_ints,
        default=[100, 1000, 5000, 10000, 50000],
        help="agent counts (default 100,1000,5000,10000,50000; 50,000 takes about 6 minutes)",
    )
    p.add_argument(
        "--idle-seconds",
        type=_positive,
        default=10.0,
        help="idle window per step (default 10 s; >= 2 heartbeat intervals is best)",
    )
    p.add_argument(
        "--relays",
        type=_counts,
        default=[0],
        help="run each step once per count: the agents dial that many relays (`agora relay`), "
        "each carrying its share to the master on one stream; 0: they dial the master "
        "(default 0; e.g. 0,5 for both)",
    )
    p.add_argument(
        "--carried",
        action="store_true",
        help="in steps without relays, each fleet process carries its agents to the master on "
        "one AgentRelay stream, as `agora relay` would, instead of a gRPC stream per agent: "
        "the master sees relayed agents, and the emulation costs this machine little, so at "
        "100,000 agents the master is what is measured",
    )


def _fairness_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agents", type=int, default=20, help="emulated agents (default 20)")
    p.add_argument(
        "--agent-resources", default="cpus:4;mem:8192", help="each agent (default cpus:4;mem:8192)"
    )
    p.add_argument(
        "--mean-duration",
        type=_positive,
        default=2.0,
        help="mean task duration, exponential (default 2 s)",
    )
    p.add_argument(
        "--sample-interval",
        type=_positive,
        default=0.25,
        help="seconds between ListFrameworks samples (default 0.25)",
    )


def _preemption_arguments(p: argparse.ArgumentParser) -> None:
    def settle_seconds(text: str) -> float:  # 0 is allowed: no settling, just --seconds
        return 0.0 if text.rstrip("s") in ("0", "0.0") else _positive(text)

    p.add_argument("--agents", type=int, default=4, help="emulated agents (default 4)")
    p.add_argument(
        "--agent-resources", default="cpus:2;mem:2048", help="each agent (default cpus:2;mem:2048)"
    )
    p.add_argument(
        "--timeout",
        type=_positive,
        default=5.0,
        help="the master's --guarantee-preemption-timeout (default 5 s)",
    )
    p.add_argument(
        "--guarantee-fraction",
        type=_positive,
        default=0.25,
        help="role b's guarantee, a fraction of the cluster's CPUs (default 0.25)",
    )
    p.add_argument(
        "--sample-interval",
        type=_positive,
        default=0.5,
        help="seconds between ListTasks samples (default 0.5)",
    )
    p.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the run without preemption",
    )
    p.add_argument(
        "--c-weight",
        type=_positive,
        default=2.0,
        help="role c's weight against a's 1; c arrives halfway wanting more than its share "
        "(default 2)",
    )
    p.add_argument(
        "--fair-timeout",
        type=_positive,
        default=None,
        help="the master's --fair-share-preemption-timeout (default: --timeout)",
    )
    p.add_argument(
        "--two-roles",
        action="store_true",
        help="leave role c out (a and b only)",
    )
    p.add_argument(
        "--b-weight",
        type=_positive,
        default=1.0,
        help="role b's weight against a's 1, given as b arrives (default 1)",
    )
    p.add_argument(
        "--settle",
        type=settle_seconds,
        default=0.0,
        metavar="SECONDS",
        help="go on until this long after the last role converged (the window in which any "
        "preemption is oscillation); the run then lasts up to --seconds + SECONDS (default 0)",
    )


def _failover_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kills", type=int, default=10, help="leader kills (default 10)")
    p.add_argument(
        "--masters",
        type=int,
        default=3,
        help="masters in the set (default 3); 1: one master with SQLite, restarted at once "
        "after each kill (how soon everything is back once it listens again)",
    )
    p.add_argument("--agents", type=int, default=3, help="real agents (default 3)")
    p.add_argument(
        "--zk-session-timeout",
        type=_positive,
        default=1.5,
        help="the masters' ZooKeeper session timeout: the floor of failover after a SIGKILL "
        "(default 1.5 s)",
    )
    p.add_argument(
        "--task-seconds",
        type=_positive,
        default=1.0,
        help="how long each launched task runs (default 1 s)",
    )
    p.add_argument(
        "--component",
        choices=("master", "batch"),
        default="master",
        help="what is killed: the leading master (default), or the leading `agora batch --zk` "
        "daemon of a set during one large job (--instances), with one master",
    )
    p.add_argument(
        "--members",
        type=int,
        default=2,
        help="--component batch: batch daemons in the set (default 2)",
    )
    p.add_argument(
        "--instances",
        type=int,
        default=1000,
        help="--component batch: instances of the job the kills fall in (default 1000)",
    )
    p.add_argument(
        "--fault",
        choices=("kill", "pause"),
        default="kill",
        help="kill: SIGKILL the leader and restart it (default); pause: SIGSTOP it until "
        "another master is elected, then SIGCONT it (it must step down without acting)",
    )


def _build_failover(args: argparse.Namespace) -> Runner:
    from agora.experiments import failover

    if args.kills < 1 or args.masters < 1 or args.agents < 1:
        raise ExperimentError("--kills, --masters and --agents must be at least 1")
    if args.component == "batch":
        from agora.experiments import batch_failover

        if args.members < 2 or args.instances < 1 or args.fault != "kill":
            raise ExperimentError(
                "--component batch needs --members 2 or more, --instances 1 or more and "
                "--fault kill"
            )
        batch_cfg = batch_failover.BatchFailoverConfig(
            kills=args.kills,
            members=args.members,
            agents=args.agents,
            instances=args.instances,
            session_timeout=args.zk_session_timeout,
        )
        return lambda out, command: batch_failover.run(batch_cfg, out, command, args.quiet)
    cfg = failover.FailoverConfig(
        kills=args.kills,
        masters=args.masters,
        agents=args.agents,
        session_timeout=args.zk_session_timeout,
        task_seconds=args.task_seconds,
        fault=args.fault,
    )
    if args.fault == "pause" and args.masters < 2:
        raise ExperimentError("--fault pause needs --masters 2 or more (a successor to elect)")
    return lambda out, command: failover.run(cfg, out, command, args.quiet)


def _build_offer_latency(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import offer_latency

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"event", "interval"}:
        raise ExperimentError(f"--modes {args.modes!r}: use event, interval or both")
    cfg = offer_latency.OfferLatencyConfig(
        agents=args.agents,
        frameworks=args.frameworks,
        grid=args.grid,
        fixed_agents=args.fixed_agents,
        fixed_frameworks=args.fixed_frameworks,
        modes=modes,
        allocation_interval=args.allocation_interval,
        allocation_batch=args.allocation_batch,
        rate=args.rate,
        mean_duration=args.mean_duration,
        probe_decline_fraction=args.decline_fraction,
        joiners=args.joiners,
        warmup=args.warmup,
        seconds=args.seconds or 10.0,
        decision_delay=args.decision_delay,
        trace=_trace(args.trace),
        dashboard_viewers=args.dashboard_viewers,
        tls=_tls_modes(args.tls),
    )
    return lambda out, command: offer_latency.run(cfg, out, command, quiet)


def _build_launch(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import launch

    if args.work_dir is not None and not (
        args.work_dir.is_dir() and os.access(args.work_dir, os.W_OK | os.X_OK)
    ):
        raise ExperimentError(
            f"--work-dir {args.work_dir}: not a directory this user can write to; "
            "create it or pick another"
        )
    cfg = launch.LaunchConfig(
        agents=args.agents,
        real_agents=args.real_agents,
        concurrency=args.concurrency,
        tasks_per_accept=args.tasks_per_accept,
        seconds=args.seconds or 10.0,
        spawn_seconds=args.spawn_seconds,
        latency_seconds=args.latency_seconds,
        warmup=args.warmup,
        work_dir=str(args.work_dir) if args.work_dir else None,
        tls=_tls_modes(args.tls),
    )
    return lambda out, command: launch.run(cfg, out, command, quiet)


def _build_scale(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import scale

    cfg = scale.ScaleConfig(
        agents=args.agents,
        idle_seconds=args.seconds or args.idle_seconds,
        relays=args.relays,
        carried=args.carried,
    )
    return lambda out, command: scale.run(cfg, out, command, quiet)


def _build_preemption(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import preemption

    cfg = preemption.PreemptionConfig(
        agents=args.agents,
        agent_resources=args.agent_resources,
        timeout=args.timeout,
        guarantee_fraction=args.guarantee_fraction,
        sample_interval=args.sample_interval,
        compare=not args.no_compare,
        seconds=args.seconds or 40.0,
        third_role=not args.two_roles,
        c_weight=args.c_weight,
        fair_timeout=args.fair_timeout,
        b_weight=args.b_weight,
        settle=args.settle,
    )
    return lambda out, command: preemption.run(cfg, out, command, quiet)


def _build_fairness(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import fairness

    cfg = fairness.FairnessConfig(
        agents=args.agents,
        agent_resources=args.agent_resources,
        mean_duration=args.mean_duration,
        sample_interval=args.sample_interval,
        seconds=args.seconds or 30.0,
    )
    return lambda out, command: fairness.run(cfg, out, command, quiet)


def _soak_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=_positive, default=30.0, help="length of the run (30)")
    p.add_argument("--agents", type=int, default=3, help="real agents (default 3)")
    p.add_argument(
        "--kill-every",
        type=_positive,
        default=60.0,
        help="mean seconds between kills of the master, an agent or the batch daemon (60)",
    )
    p.add_argument(
        "--restart-after", type=float, default=2.0, help="seconds a killed daemon stays down (2)"
    )
    p.add_argument("--job-every", type=_positive, default=5.0, help="a batch job every S s (5)")
    p.add_argument("--job-instances", type=int, default=4, help="instances per job (4)")
    p.add_argument("--task-seconds", type=float, default=2.0, help="each task's sleep (2)")
    p.add_argument("--app-instances", type=int, default=2, help="service app instances (2)")
    p.add_argument(
        "--visitor-every",
        type=_positive,
        default=30.0,
        help="a framework comes, runs 3 tasks and goes every S s (30)",
    )
    p.add_argument("--sample-every", type=_positive, default=5.0, help="sampling period (5 s)")
    p.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds of each process lifetime left out of its growth slope (60)",
    )
    p.add_argument(
        "--gc-delay", type=float, default=60.0, help="the agents' --gc-delay, seconds (60)"
    )
    p.add_argument(
        "--drain", type=_positive, default=180.0, help="seconds for the work to finish (180)"
    )
    p.add_argument("--seed", type=int, default=1, help="random seed of the fault injector")
    p.add_argument(
        "--history",
        type=int,
        default=None,
        help="history the daemons keep (ended tasks per framework, torn-down frameworks, an "
        "agent's completed tasks, finished batch jobs; default theirs): small, it fills "
        "within the run",
    )


def _build_soak(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.experiments import soak

    cfg = soak.SoakConfig(
        minutes=args.seconds / 60 if args.seconds else args.minutes,
        agents=args.agents,
        kill_every=args.kill_every,
        restart_after=args.restart_after,
        job_every=args.job_every,
        job_instances=args.job_instances,
        task_seconds=args.task_seconds,
        app_instances=args.app_instances,
        visitor_every=args.visitor_every,
        sample_every=args.sample_every,
        warmup=args.warmup,
        gc_delay=args.gc_delay,
        drain=args.drain,
        seed=args.seed,
        history=args.history,
    )
    return lambda out, command: soak.run(cfg, out, command, quiet)


def _floats(text: str) -> list[float]:
    try:
        values = [float(x.rstrip("s")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write seconds separated by commas, e.g. 0.01,0.1,1,10"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more numbers > 0")
    return values


def _omega_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agents", type=int, default=16, help="emulated agents (default 16)")
    p.add_argument(
        "--agent-resources", default="cpus:4;mem:4096", help="each agent (default cpus:4;mem:4096)"
    )
    p.add_argument(
        "--decision-times",
        type=_floats,
        default=[0.01, 0.1, 1.0, 10.0],
        help="the service framework's decision time per job, seconds, a run for each "
        "(default 0.01,0.1,1,10)",
    )
    p.add_argument(
        "--modes",
        default="pessimistic,optimistic",
        help="the master's offer modes to run each decision time in: pessimistic (offers "
        "exclusive while a framework decides), optimistic (shared, conflicts at commit) or "
        "both (default pessimistic,optimistic)",
    )
    p.add_argument(
        "--warmup", type=float, default=5.0, help="seconds before each measured window (5)"
    )
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="after the window, seconds its batch jobs get to finish launching (10)",
    )
    p.add_argument(
        "--batch-load",
        type=_fraction,
        default=0.3,
        help="share of the CPUs the batch jobs keep busy; sets their arrival rate (0.3)",
    )
    p.add_argument(
        "--service-load",
        type=_fraction,
        default=0.4,
        help="share of the CPUs the service jobs keep busy if it keeps up (0.4)",
    )
    p.add_argument(
        "--batch-decision",
        type=_positive,
        default=0.005,
        help="the batch framework's decision time per job, seconds (0.005)",
    )
    p.add_argument(
        "--gang",
        choices=["both", "holds", "no-holds", "none"],
        default="both",
        help="the gang part: with holds, without, both (default) or none",
    )
    p.add_argument("--gang-tasks", type=int, default=64, help="tasks of the gang job (64)")
    p.add_argument(
        "--gang-task",
        default="cpus:0.4;mem:400",
        help="each gang task (cpus:0.4;mem:400: 64 of them take 40%% of the default cluster, "
        "within a framework's fair share, as a hold must be)",
    )
    p.add_argument(
        "--gang-load",
        type=_fraction,
        default=0.85,
        help="share of the CPUs the small jobs keep busy in the gang part (0.85)",
    )
    p.add_argument(
        "--gang-warmup",
        type=float,
        default=20.0,
        help="seconds of small jobs before the gang is submitted (20)",
    )
    p.add_argument(
        "--gang-timeout",
        type=_positive,
        default=60.0,
        help="seconds the gang gets to start, each way (60; also the hold's timeout)",
    )
    p.add_argument(
        "--gang-mode",
        choices=["pessimistic", "optimistic"],
        default="pessimistic",
        help="the master's offer mode in the gang part (pessimistic)",
    )
    p.add_argument("--seed", type=int, default=1, help="random seed of the job arrivals (1)")


def _build_omega(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.common import Resources
    from agora.experiments import omega

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(omega.MODES):
        raise ExperimentError(f"--modes {args.modes!r}: use pessimistic, optimistic or both")
    if args.agents < 1 or args.gang_tasks < 1:
        raise ExperimentError("--agents and --gang-tasks must be at least 1")
    try:
        agent = Resources.parse(args.agent_resources)
        task = Resources.parse(args.gang_task)
    except ValueError as e:
        raise ExperimentError(f"--agent-resources / --gang-task: {e}") from None
    if task.scalar("cpus") <= 0 or task.scalar("mem") <= 0:
        raise ExperimentError(f"--gang-task {args.gang_task!r}: give cpus and mem")
    per_agent = min(
        int(agent.scalar("cpus") / task.scalar("cpus") + 1e-9),
        int(agent.scalar("mem") / task.scalar("mem") + 1e-9),
    )
    if per_agent * args.agents < args.gang_tasks:
        raise ExperimentError(
            f"{args.gang_tasks} gang tasks of {args.gang_task} do not fit even an idle cluster "
            f"of {args.agents} agents of {args.agent_resources}; add agents or shrink the gang"
        )
    defaults = omega.OmegaConfig()
    batch, service, small = defaults.batch, defaults.service, defaults.small
    batch.load, batch.decision = args.batch_load, args.batch_decision
    service.load = args.service_load
    small.load = args.gang_load
    holds = {"both": [True, False], "holds": [True], "no-holds": [False], "none": []}
    cfg = omega.OmegaConfig(
        agents=args.agents,
        agent_resources=args.agent_resources,
        decision_times=args.decision_times,
        modes=modes,
        seconds=args.seconds or 45.0,
        warmup=args.warmup,
        grace=args.grace,
        batch=batch,
        service=service,
        small=small,
        gang_holds=holds[args.gang],
        gang_tasks=args.gang_tasks,
        gang_task=args.gang_task,
        gang_mode=args.gang_mode,
        gang_warmup=args.gang_warmup,
        gang_timeout=args.gang_timeout,
        seed=args.seed,
    )
    return lambda out, command: omega.run(cfg, out, command, quiet)


def _throughput_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks", type=int, default=1000, help="tasks of `true` each path runs (default 1000)"
    )
    p.add_argument(
        "--single",
        type=int,
        default=50,
        metavar="N",
        help="single tasks, one at a time on an idle cluster, through the Batch API, the "
        "`agora job submit` command and the SDK (and srun and sbatch with --peer slurm) "
        "(default 50; 0: none)",
    )
    p.add_argument("--agents", type=int, default=2, help="real agents (default 2)")
    p.add_argument(
        "--agent-resources",
        default="cpus:1;mem:1024",
        help="each agent's --resources (default cpus:1;mem:1024: ten tasks at once)",
    )
    p.add_argument("--cpus", type=float, default=0.1, help="cpus per task (default 0.1)")
    p.add_argument("--mem", type=float, default=32.0, help="MB of memory per task (default 32)")
    p.add_argument(
        "--paths",
        default="batch,readme,sdk",
        help="the paths to run, each on a fresh cluster: batch (`agora job submit` to `agora "
        "batch`), readme (the README's framework), sdk (an SDK framework holding offers) "
        "(default batch,readme,sdk)",
    )
    p.add_argument(
        "--peer",
        default=None,
        metavar="NAME",
        help="also run the workload on a peer and give the ratios: slurm (a single-node Slurm "
        "on loopback, from Debian's slurm-wlm and munge; default: none)",
    )
    p.add_argument(
        "--timeout",
        type=_positive,
        default=900.0,
        help="seconds a path may take before it is stopped and reported unfinished (900)",
    )
    p.add_argument(
        "--isolation",
        choices=("default", "none", "namespaces", "image"),
        default="default",
        help="what the tasks run in: what agents give by default (namespaces of their own "
        "where the host allows them; the default), plain processes (agents with "
        "--no-task-namespaces), namespaces (agents with --task-namespaces), or containers of a "
        "busybox image built offline and imported into each agent (the batch path only): what "
        "isolation costs. results.json says what each agent gave (agents_isolation)",
    )
    p.add_argument(
        "--background-load",
        type=float,
        default=0.0,
        metavar="CORES",
        help="keep CORES of CPU busy with processes of their own while each path runs (0 to "
        "the machine's cores; default 0: none): what CPU taken from the daemons costs this "
        "machine's throughput, to set beside a cost of Agora's own that takes about as "
        "much (--isolation namespaces); "
        "bursts of 1 ms with sleeps between, so a share near a whole core comes out a little "
        "under it",
    )
    p.add_argument(
        "--batch-zk",
        action="store_true",
        help="run the batch path's daemon as the leader of an `agora batch --zk` pair, its "
        "state in ZooKeeper (what high availability costs on the user's path)",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="put the agents' work dirs (and the peer's files) under DIR (default: $TMPDIR "
        "or /tmp; /dev/shm as for `launch`)",
    )


def _build_throughput(args: argparse.Namespace) -> Runner:
    quiet = args.quiet
    from agora.common import Resources
    from agora.experiments import throughput

    if args.seconds is not None:
        raise ExperimentError("--seconds does not apply: throughput runs --tasks tasks per path")
    if args.tasks < 1:
        raise ExperimentError(f"--tasks {args.tasks}: run 1 or more tasks")
    if args.single < 0 or args.agents < 1:
        raise ExperimentError("--single must be 0 or more and --agents 1 or more")
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or set(paths) - set(throughput.PATHS):
        raise ExperimentError(f"--paths {args.paths!r}: use one or more of batch,readme,sdk")
    if args.peer is not None and args.peer not in throughput.PEERS:
        raise ExperimentError(f"--peer {args.peer!r}: the peer this experiment runs is slurm")
    try:
        agent = Resources.parse(args.agent_resources)
    except ValueError as e:
        raise ExperimentError(f"--agent-resources: {e}") from None
    if not (args.cpus > 0 and args.mem > 0):
        raise ExperimentError("--cpus and --mem must be more than 0")
    per_agent = min(
        int(agent.scalar("cpus") / args.cpus + 1e-9), int(agent.scalar("mem") / args.mem + 1e-9)
    )
    if per_agent < 1:
        raise ExperimentError(
            f"a task of {args.cpus:g} cpus / {args.mem:g} MB does not fit an agent of "
            f"{args.agent_resources}"
        )
    cores = os.cpu_count() or 1
    if not 0 <= args.background_load <= cores:  # also refuses NaN
        raise ExperimentError(
            f"--background-load {args.background_load:g}: give 0 to {cores} cores (the machine's)"
        )
    if args.work_dir is not None and not (
        args.work_dir.is_dir() and os.access(args.work_dir, os.W_OK | os.X_OK)
    ):
        raise ExperimentError(
            f"--work-dir {args.work_dir}: not a directory this user can write to; "
            "create it or pick another"
        )
    programs: dict[str, str] = {}
    if args.peer == "slurm":
        from agora.experiments.slurm_peer import find_programs

        found = find_programs()
        if isinstance(found, str):
            raise ExperimentError(found)
        programs = found
    cfg = throughput.ThroughputConfig(
        tasks=args.tasks,
        single=args.single,
        agents=args.agents,
        agent_resources=args.agent_resources,
        cpus=args.cpus,
        mem=args.mem,
        paths=paths,
        peer=args.peer,
        timeout=args.timeout,
        work_dir=str(args.work_dir) if args.work_dir else None,
        per_agent=per_agent,
        slurm_programs=programs,
        batch_zk=args.batch_zk,
        isolation="" if args.isolation == "default" else args.isolation,
        background_load=args.background_load,
    )
    return lambda out, command: throughput.run(cfg, out, command, quiet)


def _decision_times(text: str) -> list[float]:
    try:
        values = [float(x.rstrip("s")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write seconds, e.g. 0.01,0.1,1,10") from None
    if not values or min(values) < 0 or any(v != v for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more times >= 0 s")
    return values


def _simulate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="a trace file (JSON Lines, experiments/simulate/trace.py documents it); "
        "default: generate one shaped like Google's cluster traces",
    )
    p.add_argument("--write-trace", type=Path, default=None, help="keep the generated trace here")
    p.add_argument("--agents", type=int, default=100, help="generated trace: agents (100)")
    p.add_argument(
        "--agent-resources",
        default="cpus:8;mem:32768",
        help="generated trace: each agent (default cpus:8;mem:32768)",
    )
    p.add_argument(
        "--hours", type=_positive, default=1.0, help="generated trace: its length (default 1 h)"
    )
    p.add_argument(
        "--load",
        type=_positive,
        default=0.7,
        help="generated trace: CPU-seconds asked for / the cluster's (default 0.7)",
    )
    p.add_argument(
        "--service-share",
        type=_fraction,
        default=0.6,
        help="generated trace: the service jobs' part of the load (default 0.6)",
    )
    p.add_argument(
        "--duration-scale",
        type=_positive,
        default=1.0,
        help="generated trace: every duration times this, to compress a long shape (1)",
    )
    p.add_argument("--seed", type=int, default=1, help="generated trace: its seed (1)")
    p.add_argument(
        "--modes",
        default="pessimistic,optimistic,interval",
        help="offer modes to compare: pessimistic (Agora's default), optimistic, interval "
        "(Mesos' 1 s timer) (default: all three)",
    )
    p.add_argument(
        "--decision-times",
        type=_decision_times,
        default=[0.01, 0.1, 1.0, 10.0],
        help="the swept framework's seconds per job decision (default 0.01,0.1,1,10)",
    )
    p.add_argument(
        "--swept-role", default="service", help="whose decision time is swept (default service)"
    )
    p.add_argument(
        "--job-decision",
        type=float,
        default=0.005,
        help="the other frameworks' seconds per job decision (default 0.005)",
    )
    p.add_argument(
        "--task-decision",
        type=float,
        default=0.0005,
        help="every framework's seconds per task placed (default 0.0005)",
    )
    p.add_argument(
        "--latency",
        type=float,
        default=0.001,
        help="seconds of one message between master and framework (default 0.001)",
    )
    p.add_argument(
        "--preemption-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="preempt for a role starved below its fair share this long, by the master's own "
        "decision (its --fair-share-preemption-timeout; 0: as soon as a check finds it "
        "starved; default: off, as the master's)",
    )
    p.add_argument(
        "--unsized-offers",
        action="store_true",
        help="frameworks do not say what they wait for (scheduler.proto's Wants): a revive is "
        "offered every agent with room, as in Mesos (default: offers sized by demand, as the "
        "batch framework asks)",
    )
    p.add_argument(
        "--cross-check",
        action="store_true",
        help="also run the trace on a real master with emulated agents, in real time, and "
        "compare utilisation and job waits (for small traces: it takes the trace's length)",
    )


def _build_simulate(args: argparse.Namespace) -> Runner:
    from agora.common import Resources
    from agora.experiments.simulate.engine import MODES, SimConfig
    from agora.experiments.simulate.generator import Shape
    from agora.experiments.simulate.run import SimulateConfig, run

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        raise ExperimentError(f"--modes {args.modes!r}: use some of {', '.join(MODES)}")
    for flag, value in (
        ("--job-decision", args.job_decision),
        ("--task-decision", args.task_decision),
        ("--latency", args.latency),
        ("--preemption-timeout", 0 if args.preemption_timeout is None else args.preemption_timeout),
    ):
        if not value >= 0:
            raise ExperimentError(f"{flag} must be 0 or more seconds, got {value}")
    try:
        agent = Resources.parse(args.agent_resources)
        shape = Shape(
            agents=args.agents,
            agent_cpus=agent.scalar("cpus"),
            agent_mem=agent.scalar("mem"),
            seconds=args.seconds or args.hours * 3600,
            load=args.load,
            service_share=args.service_share,
            duration_scale=args.duration_scale,
            seed=args.seed,
        )
    except ValueError as e:
        raise ExperimentError(f"--agents / --agent-resources / --hours / --load: {e}") from None
    cfg = SimulateConfig(
        trace=args.trace,
        shape=shape,
        write_trace=args.write_trace,
        modes=modes,
        decision_times=args.decision_times,
        swept_role=args.swept_role,
        cross_check=args.cross_check,
        sim=SimConfig(
            latency_seconds=args.latency,
            job_decision=args.job_decision,
            task_decision=args.task_decision,
            preemption_timeout=args.preemption_timeout,
            sized_offers=not args.unsized_offers,
        ),
    )
    if args.trace is not None:  # read now: a bad file is a one-line error before any run
        from agora.experiments.simulate.trace import TraceError, read_trace

        try:
            roles = read_trace(args.trace).cluster.roles
        except TraceError as e:
            raise ExperimentError(f"--trace: {e}") from None
        if args.swept_role not in roles:
            raise ExperimentError(
                f"--swept-role {args.swept_role!r} is not a role of the trace ({', '.join(roles)})"
            )
    quiet = args.quiet
    return lambda out, command: run(cfg, out, command, quiet)


def _trace(path: Path | None):
    from agora.experiments.load import load_trace

    if path is None:
        return None
    try:
        return load_trace(path)
    except (OSError, ValueError) as e:
        raise ExperimentError(f"--trace: {e}") from None


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="offer-latency",
            help="freed resources -> offer, event-driven vs 1 s timer",
            description="Time from resources becoming free (task end, decline, agent "
            "join, subscribe) to the offer reaching a framework, sweeping "
            "agents and frameworks, in event-driven mode and Mesos' "
            "fixed-interval mode.",
            add_arguments=_offer_latency_arguments,
            build=_build_offer_latency,
            full=("--agents", "10,100,1000,10000", "--frameworks", "1,10,100", "--seconds", "15"),
            quick=(
                "--agents",
                "10,100",
                "--frameworks",
                "1,10",
                "--fixed-agents",
                "100",
                "--seconds",
                "5",
            ),
        ),
        Experiment(
            name="launch",
            help="accept -> RUNNING latency and tasks per second",
            description="Accept -> TASK_RUNNING latency and task throughput, on "
            "emulated agents or (--real-agents N) real agent processes "
            "running real processes, against the machine's raw process "
            "spawn rate measured in the same run.",
            add_arguments=_launch_arguments,
            build=_build_launch,
            # Work dirs on tmpfs: on the machine this was written on, creating files on the disk
            # got 10-30 times slower for minutes after heavy file churn in the same place (the run
            # reports the speed it found), which made the figures depend on the previous run.
            full=("--real-agents", "2", "--seconds", "10", "--work-dir", "/dev/shm"),
            quick=("--real-agents", "1", "--seconds", "4"),
        ),
        Experiment(
            name="scale",
            help="master CPU, memory, heartbeats, allocation vs agents",
            description="Master CPU and RSS while idle with N emulated agents "
            "heartbeating, CPU per heartbeat, and allocation time "
            "(full cycle and one re-offer), as N grows.",
            add_arguments=_scale_arguments,
            build=_build_scale,
            full=(
                "--agents",
                "100,1000,5000,10000,20000,50000",
                "--relays",
                "0,5",
                "--seconds",
                "15",
            ),
            quick=("--agents", "100,1000", "--seconds", "5"),
        ),
        Experiment(
            name="preemption",
            help="a role below its guarantee on a full cluster, with preemption and without",
            description="Role a fills the cluster; role b, guaranteed a share of the CPUs, "
            "arrives wanting it; role c, weighted, arrives later wanting more than its fair "
            "share. Reports the time until b runs its guarantee and c its weighted share, the "
            "tasks preempted against the fewest needed, any preempted after that "
            "(oscillation) and the work lost, beside the same run without preemption.",
            add_arguments=_preemption_arguments,
            build=_build_preemption,
            full=("--seconds", "60", "--settle", "60"),
            quick=("--seconds", "30"),
        ),
        Experiment(
            name="fairness",
            help="DRF shares over time against the DRF optimum",
            description="Three frameworks with different task shapes arrive and "
            "leave; samples each dominant share from the Operator API "
            "and compares the allocation while all three run with the "
            "DRF optimum by progressive filling.",
            add_arguments=_fairness_arguments,
            build=_build_fairness,
            full=("--agents", "20", "--seconds", "60"),
            quick=("--agents", "10", "--seconds", "20"),
        ),
        Experiment(
            name="failover",
            help="SIGKILL the leading master (or batch daemon of a set): time until agents, "
            "frameworks and clients are back",
            description="Three masters on a real ZooKeeper; the leader is killed with SIGKILL "
            "over and over while real agents run tasks and a framework launches. Per kill: new "
            "leader elected, all agents re-registered, the framework re-subscribed, first "
            "offer; and tasks lost or run twice over the whole run.",
            add_arguments=_failover_arguments,
            build=_build_failover,
            full=("--kills", "20"),
            quick=("--kills", "3"),
        ),
        Experiment(
            name="soak",
            help="steady mixed load while daemons are SIGKILLed: nothing lost, nothing grows",
            description="A local cluster (master, real agents, batch and services daemons) "
            "under batch jobs, a service app and frameworks that come and go, while the master, "
            "agents and the batch daemon are killed and restarted at random. Reports tasks "
            "lost or run twice, status updates lost, and the growth of each daemon's memory "
            "and descriptors and of the sandboxes on disk.",
            add_arguments=_soak_arguments,
            build=_build_soak,
            full=("--minutes", "30"),
            quick=("--minutes", "3", "--kill-every", "20"),
        ),
        Experiment(
            name="omega",
            help="Omega's experiment: batch job wait vs the service framework's decision time, "
            "pessimistic vs optimistic offers; a gang with and without holds",
            description="A batch framework (many short jobs, quick decisions) and a service "
            "framework (fewer, larger jobs) share emulated agents; the service framework's "
            "decision time per job is swept (--decision-times) in each offer mode (--modes: "
            "offers exclusive while a framework decides, or shared with conflicts found at "
            "commit). Reports the batch job wait (submit -> all tasks launched), each "
            "framework's busyness (share of time deciding), conflict rate and wasted work; then "
            "the wait of one --gang-tasks gang job on a cluster kept busy by small jobs, with "
            "and without holds. Plots on Omega's axes (log decision time).",
            add_arguments=_omega_arguments,
            build=_build_omega,
            full=("--seconds", "45"),
            quick=("--decision-times", "0.01,1", "--seconds", "15", "--gang-timeout", "30"),
        ),
        Experiment(
            name="throughput",
            help="the user's paths (`agora job submit`, the README's framework, an SDK "
            "framework holding offers): tasks/s, submit -> start, CPU per task; --peer slurm",
            description="N x `true` (0.1 cpu, 32 MB each) on a master and two real agents of "
            "cpus:1;mem:1024, through the batch framework (`agora job submit` to `agora "
            'batch`), through the README\'s "Write your own framework" code as its own '
            "process, and through an SDK framework that holds offers, each on a fresh "
            "cluster: tasks/s, launch -> RUNNING, CPU per task per daemon; then single tasks "
            "one at a time (Batch API, the command, the SDK). --peer slurm runs the same on a "
            "single-node Slurm and gives the ratios.",
            add_arguments=_throughput_arguments,
            build=_build_throughput,
            full=("--tasks", "1000", "--single", "50", "--work-dir", "/dev/shm"),
            quick=("--tasks", "200", "--single", "10"),
        ),
        Experiment(
            name="simulate",
            help="a workload trace through the real allocator on a virtual clock: offer "
            "modes side by side on Omega's axes, no network, no processes",
            description="Replays a trace (--trace FILE, or one generated with the shape of "
            "Google's cluster traces) through the master's real allocator and the batch "
            "framework's real planner on a virtual clock, in each offer mode (pessimistic, "
            "optimistic, Mesos' interval) and for each decision time of the swept framework. "
            "Reports utilisation, job wait by size class, each role's dominant share against "
            "the DRF optimum, offers and cycles per second and the allocator's CPU per cycle.",
            add_arguments=_simulate_arguments,
            build=_build_simulate,
            full=("--agents", "200", "--hours", "2"),
            quick=("--agents", "50", "--hours", "0.25", "--decision-times", "0.01,10"),
        ),
    )
}


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """What every experiment takes: where to write, how long to measure, quiet."""
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for results.json, samples.csv, the plots and summary.md",
    )
    p.add_argument("--seconds", type=_positive, help="measured window of each run (seconds)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def parse(name: str, argv: list[str]) -> argparse.Namespace:
    """`agora experiment NAME ARGV` parsed as the command line would (report.py's sizes)."""
    experiment = EXPERIMENTS[name]
    p = argparse.ArgumentParser(prog=f"agora experiment {name}")
    experiment.add_arguments(p)
    add_common_arguments(p)
    return p.parse_args(argv)
