"""`agora bench allocator`: times the allocator on a cluster built in memory (no network)."""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import time

from agora.cli.errors import CommandError

AGENT_RESOURCES = "cpus:24;mem:4096;disk:4096;ports:[31000-32000]"  # Mesos' benchmark agents


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark a component in memory (allocator)",
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
    a.add_argument("--json", action="store_true", help="print JSON for scripts")
    a.set_defaults(func=_run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _rss_mb() -> float:
    # ru_maxrss is in KiB on Linux: the peak resident set of this process so far.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "min": round(min(samples_ms), 3),
        "median": round(statistics.median(samples_ms), 3),
        "max": round(max(samples_ms), 3),
    }


def run_allocator_bench(
    agents: int,
    frameworks: int,
    roles: int = 1,
    cycles: int = 5,
    reoffers: int = 200,
    sorter: str = "drf",
    refuse_seconds: float = 0.0,
) -> dict:
    """Builds the cluster, runs the cycles, returns the figures (see the command's help)."""
    from agora.common import Resources
    from agora.master.allocator import Allocator, AllocatorConfig

    try:
        config = AllocatorConfig(role_sorter=sorter, framework_sorter=sorter, seed=1)
    except ValueError as e:
        raise CommandError(str(e)) from None
    baseline_mb = _rss_mb()
    total = Resources.parse(AGENT_RESOURCES)
    now = 0.0

    started = time.perf_counter()
    alloc = Allocator(config)
    role_names = ["*"] if roles == 1 else [f"role{i}" for i in range(roles)]
    for i in range(frameworks):
        alloc.add_framework(f"framework-{i}", role=role_names[i % len(role_names)])
    for i in range(agents):
        alloc.add_agent(f"agent-{i}", total, {"rack": f"r{i % 40}"})
    setup_ms = (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    grants = alloc.allocate(now)
    first_ms = (time.perf_counter() - started) * 1000
    if len(grants) != agents:  # a benchmark checks its set-up before it times anything
        raise CommandError(f"first cycle offered {len(grants)} of {agents} agents; expected all")

    gc.collect()
    cycle_ms = []
    cycle_offers = []
    refuse = refuse_seconds or None
    for _ in range(cycles):
        for g in grants:
            alloc.recover(g.framework_id, g.agent_id, g.resources, now, refuse_seconds=refuse)
        started = time.perf_counter()
        grants = alloc.allocate(now)
        cycle_ms.append((time.perf_counter() - started) * 1000)
        cycle_offers.append(len(grants))
        if not grants:
            raise CommandError("a timed cycle offered nothing (fewer frameworks than cycles?)")

    # One freed agent at a time: recover its offer and allocate over just that agent.
    reoffer_ms = []
    by_agent = {g.agent_id: g for g in grants}
    agent_ids = list(by_agent)
    for k in range(reoffers):
        agent_id = agent_ids[(k * 7919) % len(agent_ids)]
        g = by_agent[agent_id]
        started = time.perf_counter()
        alloc.recover(g.framework_id, agent_id, g.resources, now)
        (again,) = alloc.allocate(now, agent_ids=[agent_id])
        reoffer_ms.append((time.perf_counter() - started) * 1000)
        by_agent[agent_id] = again

    return {
        "agents": agents,
        "frameworks": frameworks,
        "roles": roles,
        "sorter": sorter,
        "agent_resources": AGENT_RESOURCES,
        "setup_ms": round(setup_ms, 1),
        "first_cycle_offers": agents,
        "first_cycle_ms": round(first_ms, 3),
        "refuse_seconds": refuse_seconds,
        "cycles": cycles,
        "cycle_offers": cycle_offers,
        "cycle_ms": _summary(cycle_ms),
        "reoffers": reoffers,
        "reoffer_ms": _summary(reoffer_ms),
        "baseline_rss_mb": round(baseline_mb, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
        "python": sys.version.split()[0],
    }


def _run(args: argparse.Namespace) -> int:
    result = run_allocator_bench(
        args.agents,
        args.frameworks,
        args.roles,
        args.cycles,
        args.reoffers,
        args.sorter,
        args.refuse_seconds,
    )
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
    print(
        f"  peak memory            {result['peak_rss_mb']:.1f} MB RSS "
        f"(baseline {result['baseline_rss_mb']:.1f} MB before building)"
    )
    return 0
