"""`agora bench allocator`: times the allocator on a cluster built in memory (no network).
`agora bench streams`: what an open gRPC stream costs a bare Python server in memory.
`agora bench tasks`: an agent's own CPU per task (launch, updates, records), no network.
`agora bench hops`: a message's time across two bare gRPC hops, the floor under offer latency."""

from __future__ import annotations

import argparse
import json

from agora.cli.errors import CommandError
from agora.common.arguments import whole_number

# What experiments/bench.py builds each agent with (a test keeps the two the same): written
# out here so that `agora bench --help` does not load the lab.
AGENT_RESOURCES = "cpus:24;mem:4096;disk:4096;ports:[31000-32000]"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark a component (allocator, streams, tasks, hops)",
        description="Benchmarks that build their input in memory and print their figures.",
    )
    sub = p.add_subparsers(dest="bench_target", metavar="TARGET")
    sub.required = True
    a = sub.add_parser(
        "allocator",
        help="time full allocation cycles and a one-agent re-offer",
        description=(
            "Builds --agents agents (" + AGENT_RESOURCES + ") and --frameworks frameworks spread "
            "over --roles roles, checks that the first cycle offers every agent, then times full "
            "cycles (every offer is recovered between cycles so each cycle has real work, the "
            "shape of Mesos' DeclineOffers benchmark) and the re-offer of one freed agent "
            "(recover + an allocation over that agent). Prints min/median/max in ms and the "
            "peak memory of the process."
        ),
    )
    a.add_argument("--agents", type=_positive, required=True, help="number of agents")
    a.add_argument("--frameworks", type=_positive, required=True, help="number of frameworks")
    a.add_argument(
        "--roles",
        type=_positive,
        default=1,
        help="roles the frameworks are spread over (default 1: the '*' role)",
    )
    a.add_argument("--cycles", type=_positive, default=5, help="timed full cycles (default 5)")
    a.add_argument(
        "--reoffers", type=_positive, default=200, help="timed one-agent re-offers (default 200)"
    )
    from agora.master.allocator import sorter_names

    a.add_argument(
        "--sorter",
        default="drf",
        choices=sorter_names(),
        help="role and framework sorter (default drf)",
    )
    a.add_argument(
        "--refuse-seconds",
        type=_seconds,
        default=0.0,
        help="decline every offer with this filter between cycles, as Mesos' "
        "DeclineOffers does (INT_MAX there): each cycle must then skip the "
        "frameworks that declined an agent before (default 0: plain recover)",
    )
    a.add_argument(
        "--preemption",
        action="store_true",
        help="also time what preemption adds (the snapshot the master reads each tick, and "
        "the decision when a starved role is due) on the full cluster and on a fragmented one "
        "(some room free on every agent), and a full cycle that lends idle guarantee headroom "
        "to a revocable framework",
    )
    a.add_argument("--json", action="store_true", help="print JSON for scripts")
    a.set_defaults(func=_run)
    s = sub.add_parser(
        "streams",
        help="server memory per open gRPC stream, with nothing of Agora's on it",
        description=(
            "Starts a bare grpc.aio server with the master's server options and opens --streams "
            "bidirectional streams to it from child processes (5,000 each; --per-connection to an "
            "HTTP/2 connection), one message each, answered once. Prints the server's RSS "
            "before and after, and per stream: the floor under the master's memory per agent "
            "(compare `agora experiment scale`)."
        ),
    )
    s.add_argument(
        "--streams", type=_positive, default=10_000, help="streams to open (default 10000)"
    )
    s.add_argument(
        "--per-connection",
        type=_positive,
        default=100,
        help="streams per HTTP/2 connection (default 100)",
    )
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
    s.set_defaults(func=_run_streams)
    t = sub.add_parser(
        "tasks",
        help="an agent's own CPU per task, without the network",
        description=(
            "Runs --tasks tasks (`true`, 0.1 cpus and 16 MB each, in their cgroups where the "
            "agent could make them) through the agent's task manager and status-update manager "
            "and its task wrapper, --concurrency at a time, with every update acknowledged at "
            "once in place of a master. Prints the agent's CPU per task (its own process) and "
            "that of each task's wrapper and command (its children). Run as root for cgroups."
        ),
    )
    t.add_argument("--tasks", type=_positive, default=2000, help="tasks to run (default 2000)")
    t.add_argument("--concurrency", type=_positive, default=16, help="tasks at a time (default 16)")
    t.add_argument(
        "--work-dir",
        metavar="DIR",
        default=None,
        help="make the agent's work dir under DIR (default: $TMPDIR or /tmp; the cost of "
        "the per-task files depends on the filesystem: /dev/shm is in memory)",
    )
    t.add_argument(
        "--no-cgroups", action="store_true", help="process groups only, no cgroup per task"
    )
    t.add_argument("--json", action="store_true", help="print JSON for scripts")
    t.set_defaults(func=_run_tasks)
    h = sub.add_parser(
        "hops",
        help="a message's latency across two bare gRPC hops (the floor under offer latency)",
        description=(
            "A sender process writes --messages stamped messages, --rate a second, on a "
            "bidirectional stream (as an agent's status updates) to a bare grpc.aio server in "
            "this process, which writes each at once on a server stream (as the master's "
            "events) to a reader process. Prints the sender's stamp -> the reader's read, in ms: "
            "the two gRPC hops of an offer's latency with none of the master's work (compare "
            "`agora experiment offer-latency`)."
        ),
    )
    h.add_argument("--messages", type=_positive, default=400, help="messages timed (default 400)")
    h.add_argument(
        "--rate",
        type=_rate,
        default=40.0,
        help="messages a second (default 40, the task ends a second of offer-latency's "
        "1,000-agent run)",
    )
    h.add_argument("--size", type=_positive, default=200, help="bytes a message (default 200)")
    h.add_argument("--json", action="store_true", help="print JSON for scripts")
    h.set_defaults(func=_run_hops)


_positive = whole_number(1)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 10_000:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 10000, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    from agora.experiments.bench import BenchError, run_allocator_bench

    try:
        result = run_allocator_bench(
            args.agents,
            args.frameworks,
            args.roles,
            args.cycles,
            args.reoffers,
            args.sorter,
            args.refuse_seconds,
            args.preemption,
        )
    except BenchError as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    c, r = result["cycle_ms"], result["reoffer_ms"]
    declining = (
        f", offers declined for {result['refuse_seconds']:g} s" if result["refuse_seconds"] else ""
    )
    print(
        f"allocator: {result['agents']} agents x {result['frameworks']} frameworks in "
        f"{result['roles']} role(s), sorter {result['sorter']}{declining}"
    )
    print(f"  set-up                 {result['setup_ms']:.1f} ms")
    print(
        f"  first cycle            {result['first_cycle_ms']:.1f} ms "
        f"({result['first_cycle_offers']} offers)"
    )
    print(
        f"  full cycle  ({result['cycles']:>4}x)   min {c['min']:.1f}  median {c['median']:.1f}  "
        f"max {c['max']:.1f} ms"
    )
    print(
        f"  re-offer 1  ({result['reoffers']:>4}x)   min {r['min']:.3f}  median "
        f"{r['median']:.3f}  max {r['max']:.3f} ms"
    )
    p = result["preemption"]
    if p is not None:
        snap, decide = p["snapshot_ms"], p["plan_ms"]
        print(
            f"  preemption snapshot    min {snap['min']:.1f}  median {snap['median']:.1f}  "
            f"max {snap['max']:.1f} ms (each tick once a role has waited its timeout)"
        )
        print(
            f"  preemption decision    min {decide['min']:.1f}  median {decide['median']:.1f}  "
            f"max {decide['max']:.1f} ms ({p['running_tasks']} running tasks, "
            f"{p['victims']} victim(s) chosen)"
        )
        frag = p["fragmented"]
        fsnap, fdecide = frag["snapshot_ms"], frag["plan_ms"]
        print(
            f"  fragmented snapshot    min {fsnap['min']:.1f}  median {fsnap['median']:.1f}  "
            f"max {fsnap['max']:.1f} ms (room free on all {frag['agents_with_room']} agents)"
        )
        print(
            f"  fragmented decision    min {fdecide['min']:.1f}  median {fdecide['median']:.1f}  "
            f"max {fdecide['max']:.1f} ms ({frag['victims']} victim(s) chosen)"
        )
        lending = p["revocable"]["cycle_ms"]
        print(
            f"  cycle with lending     min {lending['min']:.1f}  median {lending['median']:.1f}  "
            f"max {lending['max']:.1f} ms (a revocable framework lent "
            f"{max(p['revocable']['lent_offers'])} offers of idle guarantee headroom)"
        )
    print(
        f"  peak memory            {result['peak_rss_mb']:.1f} MB RSS "
        f"(baseline {result['baseline_rss_mb']:.1f} MB before building)"
    )
    return 0


def _run_streams(args: argparse.Namespace) -> int:
    from agora.experiments.bench_streams import BenchError, run_streams_bench

    try:
        result = run_streams_bench(args.streams, args.per_connection)
    except BenchError as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"streams: {result['streams']} open to a bare grpc.aio server "
        f"({result['streams_per_connection']} per connection) in {result['open_seconds']} s"
    )
    print(f"  server RSS   {result['rss_mb_before']} MB -> {result['rss_mb_open']} MB")
    print(f"  per stream   {result['kb_per_stream']} KB")
    return 0


def _run_tasks(args: argparse.Namespace) -> int:
    from agora.common.logs import configure_logging
    from agora.experiments.bench_tasks import BenchError, run_tasks_bench

    configure_logging("warning", final=True)  # the task manager logs every task at info
    try:
        result = run_tasks_bench(
            args.tasks, args.concurrency, args.work_dir, cgroups=not args.no_cgroups
        )
    except BenchError as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    agent, children = result["agent_cpu_per_task"], result["wrapper_and_task_cpu_per_task"]
    print(
        f"tasks: {result['tasks']} ({result['concurrency']} at a time, isolation "
        f"{result['isolation']}, work dir under {result['work_dir']}) in {result['seconds']} s, "
        f"{result['tasks_per_second']}/s"
    )
    print(
        f"  agent CPU per task            {agent['ms']} ms "
        f"(user {agent['user_ms']}, system {agent['system_ms']})"
    )
    if children is None:
        print("  wrapper + task CPU per task   not measured (the agent's launcher spawns them)")
    else:
        print(
            f"  wrapper + task CPU per task   {children['ms']} ms "
            f"(user {children['user_ms']}, system {children['system_ms']})"
        )
    return 0


def _run_hops(args: argparse.Namespace) -> int:
    from agora.experiments.bench_hops import BenchError, run_hops_bench

    try:
        result = run_hops_bench(args.messages, args.rate, args.size)
    except BenchError as e:
        raise CommandError(str(e)) from None
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    ms = result["latency_ms"]
    print(
        f"hops: {result['received']} of {result['messages']} messages of {result['bytes']} bytes, "
        f"{result['rate_per_second']:g} a second, sender -> bare grpc.aio server -> reader"
    )
    print(
        f"  latency   p50 {ms['p50']:.3f}  p90 {ms['p90']:.3f}  p99 {ms['p99']:.3f}  "
        f"max {ms['max']:.3f} ms"
    )
    return 0
