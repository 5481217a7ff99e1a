"""`python -m agora.experiments.report`: run every experiment at the documented size and rewrite
the results section of docs/experiments.md (`make experiments`).

Each experiment writes into docs/figures/NAME/ (results.json, summary.md, samples.csv, PNGs);
the section between the `results:begin` and `results:end` markers of docs/experiments.md is
generated from those results.json files, so the page always shows the last run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from agora.experiments.catalog import EXPERIMENTS, parse
from agora.experiments.results import fmt_ms, measured_cell, stats_table

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


# Second runs of an experiment with other flags, each into figures/<its own name>:
# (experiment, directory, full flags, quick flags).
VARIANTS = [
    ("failover", "failover-pause", ("--fault", "pause", "--kills", "20"), ("--fault", "pause")),
    (
        "failover",
        "failover-batch",
        ("--component", "batch", "--kills", "10"),
        ("--component", "batch", "--kills", "2", "--instances", "200"),
    ),
]


async def run_all(names: list[str], figures: Path, quick: bool) -> None:
    runs = [
        (name, name, EXPERIMENTS[name].quick if quick else EXPERIMENTS[name].full) for name in names
    ]
    runs += [
        (name, folder, quick_flags if quick else full)
        for name, folder, full, quick_flags in VARIANTS
        if name in names
    ]
    for name, folder, chosen in runs:
        experiment = EXPERIMENTS[name]
        out = figures / folder
        flags = [*chosen, "--out", str(out)]
        command = ["agora", "experiment", name, *flags]
        print(f"== {' '.join(command)}", flush=True)
        started = time.monotonic()
        # Exactly what `agora experiment NAME FLAGS` would run (quiet: the log is the report).
        runner = experiment.build(parse(name, [*flags, "--quiet"]))
        await runner(out, command)
        print(f"== {name} took {time.monotonic() - started:.0f} s", flush=True)


def _load(figures: Path, name: str) -> dict | None:
    path = figures / name / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def _targets(all_results: list[dict]) -> list[str]:
    lines = ["| target | measured | limit | met | where |", "|---|---:|---:|---|---|"]
    for data in all_results:
        for t in data["targets"]:
            sign = "<=" if t["at_most"] else ">="
            met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
            lines.append(
                f"| {t['name']} | {measured_cell(t)} | {sign} {t['limit']:g} {t['unit']} | {met} "
                f"| {t['measured_in']} |"
            )
    return lines


def _images(docs: Path, figures: Path, data: dict, name: str) -> list[str]:
    rel = figures.relative_to(docs) if figures.is_relative_to(docs) else figures
    return [f"![{plot}]({rel}/{name}/{plot})" for plot in data.get("plots", [])]


def section(docs: Path, figures: Path) -> str:
    found = {name: _load(figures, name) for name in EXPERIMENTS}
    present = [d for d in found.values() if d]
    if not present:
        return "No results yet: run `make experiments`.\n"
    machine = present[0]["machine"]
    out = [
        f"Last run: {present[0]['started_at']} on {machine['cpu_model']}, "
        f"{machine['cores']} cores, {machine['memory_mb']} MB, Python {machine['python']} "
        f"(load average at start {machine.get('load_average_at_start')}).",
        "",
        "### Targets (issue 5)",
        "",
        *_targets(present),
        "",
    ]
    ol = found["offer-latency"]
    if ol:
        out += [
            "### offer-latency",
            "",
            f"`{' '.join(ol['command'])}`",
            "",
            "Offer latency is end to end: the agent's stamp on a task's end -> a framework reads "
            "the offer of its resources. Update read -> offer read is the gap between a "
            "framework reading that task's end and reading the offer, which often arrive in one "
            "batch.",
            "",
            "| run | offer latency p50 / p99 (ms) | update read -> offer read p50 | "
            "decline -> re-offer p50 / p99 | join -> offer p50 | subscribe -> first offer p50 "
            "| master CPU (cores) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in ol["runs"]:
            f = r["figures_ms"]
            end = f.get("task_end_agent_to_offer")
            out.append(
                f"| {r['label']} | {fmt_ms(end)} / {fmt_ms(end, 'p99')} | "
                f"{fmt_ms(f['task_end_to_offer'])} | "
                f"{fmt_ms(f['decline_to_offer'])} / {fmt_ms(f['decline_to_offer'], 'p99')}"
                f" | {fmt_ms(f['join_to_offer'])} | "
                f"{fmt_ms(f['subscribe_to_first_offer'])} | {r['master_cpu_cores']} |"
            )
        out += ["", *_images(docs, figures, ol, "offer-latency"), ""]
    la = found["launch"]
    if la:
        r = la["runs"][0]
        raw = r.get("raw_spawn") or {}
        py = r.get("raw_python_spawn") or {}
        out += [
            "### launch",
            "",
            f"`{' '.join(la['command'])}`",
            "",
            f"- accept -> RUNNING, one task at a time: p50 "
            f"{fmt_ms(r['figures_ms']['accept_to_running'])} ms, p99 "
            f"{fmt_ms(r['figures_ms']['accept_to_running'], 'p99')} ms",
            f"- accept -> STARTING (before the agent launches the command): p50 "
            f"{fmt_ms(r['figures_ms'].get('accept_to_starting'))} ms",
            f"- with {r['concurrency']} in flight: p50 "
            f"{fmt_ms(r['figures_ms']['accept_to_running_loaded'])} ms",
            f"- throughput {r['tasks_per_second']} tasks/s; raw spawn of `true` "
            f"{raw.get('per_second')}/s (ratio {r.get('throughput_vs_raw_spawn')}); "
            f"`python -c pass` {py.get('per_second')}/s (ratio "
            f"{r.get('throughput_vs_python_spawn')})",
            *_launches_line(r),
            *_filesystem_line(r),
            "",
            *_cpu_table(r),
            *_images(docs, figures, la, "launch"),
            "",
        ]
    sc = found["scale"]
    if sc:
        out += [
            "### scale",
            "",
            f"`{' '.join(sc['command'])}`",
            "",
            "| agents | relays | registered in (s) | idle master CPU (cores) | us per heartbeat | "
            "RSS idle (MB) | full allocation (ms) | one re-offer p50 (ms) | agents removed |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(sc["runs"], key=lambda r: (r["agents"], r.get("relays", 0))):
            f = r["figures_ms"]
            out.append(
                f"| {r['agents']} | {r.get('relays', 0)} | {r['register_seconds']} | "
                f"{r['idle_master_cpu_cores']} | {r['master_cpu_per_heartbeat_us']} | "
                f"{r['master_rss_mb_idle']} | "
                f"{fmt_ms(_whole_round(f))} | "
                f"{fmt_ms(f['one_agent_decline_to_reoffer'])} | {r.get('agents_removed', '-')} |"
            )
        out += ["", *_images(docs, figures, sc, "scale"), ""]
    fa = found["fairness"]
    if fa:
        r = fa["runs"][0]
        out += [
            "### fairness",
            "",
            f"`{' '.join(fa['command'])}`",
            "",
            "| framework | measured dominant share | DRF optimum | tasks | optimum tasks |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, v in r["final_allocation"].items():
            out.append(
                f"| {name} | {v['measured_dominant_share']} | "
                f"{v['optimum_dominant_share']} | {v['measured_tasks']} | "
                f"{v['optimum_tasks']} |"
            )
        out += ["", *_images(docs, figures, fa, "fairness"), ""]
    fo = found["failover"]
    if fo:
        r = fo["runs"][0]
        out += [
            "### failover",
            "",
            f"`{' '.join(fo['command'])}`",
            "",
            f"{r['kills']} SIGKILLs of the leader (ZooKeeper session timeout "
            f"{r['session_timeout_seconds']} s): tasks launched {r['tasks_launched']}, lost "
            f"{r['tasks_lost']}, run twice {r['tasks_run_twice']}.",
            "",
            stats_table([(k.replace("_", " "), v) for k, v in r["seconds"].items()], unit="s"),
            "",
            *_images(docs, figures, fo, "failover"),
            "",
        ]
    fp = _load(figures, "failover-pause")
    if fp:
        r = fp["runs"][0]
        out += [
            "#### failover: the leader paused across an election",
            "",
            f"`{' '.join(fp['command'])}`",
            "",
            f"{r['kills']} times the leader was stopped with SIGSTOP until ZooKeeper elected "
            "another master, then resumed 0.5 s later. Events and answers the framework took "
            "from a master after its successor's election: "
            f"{r['events_from_a_deposed_leader']}; tasks launched {r['tasks_launched']}, lost "
            f"{r['tasks_lost']}, run twice {r['tasks_run_twice']}. Times from the SIGSTOP; "
            "'resumed to refusing' from the SIGCONT until the old leader answered NOT_LEADER.",
            "",
            stats_table([(k.replace("_", " "), v) for k, v in r["seconds"].items()], unit="s"),
            "",
        ]
    fb = _load(figures, "failover-batch")
    if fb:
        r = fb["runs"][0]
        out += [
            "#### failover: the leading batch daemon of a set",
            "",
            f"`{' '.join(fb['command'])}`",
            "",
            f"Two `agora batch --zk` daemons; the leader killed with SIGKILL {r['kills']} times "
            f"during one job of {r['instances']} instances, each time restarted to stand by. "
            f"Instances succeeded {r['succeeded']}, lost {r['instances_lost']}, run twice "
            f"{r['instances_run_twice']}. 'client back': a client finding the Batch API "
            "through the master gets the job; 'launches back': the job shows more instances "
            "launched than just before the kill.",
            "",
            stats_table([(k.replace("_", " "), v) for k, v in r["seconds"].items()], unit="s"),
            "",
        ]
    so = found.get("soak")
    if so:
        r = so["runs"][0]
        b, v = r["batch"], r["visitors"]
        rows = [
            f"| {d} | {e['median']} | {e['max']} | "
            f"{r['fds_slope_per_hour'].get(d, {}).get('median')} |"
            for d, e in sorted(r["rss_slope_mb_per_hour"].items())
        ]
        out += [
            "### soak",
            "",
            f"`{' '.join(so['command'])}`",
            "",
            f"{r['minutes']:g} minutes, {len(r['kills'])} SIGKILLs ("
            + ", ".join(f"{k} {n}" for k, n in r["kills_by_victim"].items())
            + f"). Batch: {b['jobs']} jobs, {b['instances']} instances; lost "
            f"{len(b['lost'])}, run twice {len(b['run_twice'])}, updates lost "
            f"{len(b['updates_lost'])}. Visitors: {v['visitors']} frameworks came and went, "
            f"{v['tasks_finished']} of {v['tasks_expected']} tasks finished ({v['relaunched']} "
            f"relaunched after LOST/UNKNOWN), lost {len(v['lost'])}, run twice "
            f"{len(v['run_twice'])}. Service app: {r['app_healthy_at_end']} of "
            f"{r['app_instances']} instances healthy at the end.",
            "",
            "| daemon | RSS slope median (MB/h) | RSS slope max (MB/h) | descriptors slope "
            "median (/h) |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            f"Sandboxes on disk: {r['sandbox_disk_slope_mb_per_hour']} MB/h after the warm-up.",
            "",
            *_images(docs, figures, so, "soak"),
            "",
        ]
    om = found.get("omega")
    if om:
        out += ["### omega", "", f"`{' '.join(om['command'])}`", "", *_omega_rows(om), ""]
        out += [*_images(docs, figures, om, "omega"), ""]
    sim = found.get("simulate")
    if sim:
        out += ["### simulate", "", f"`{' '.join(sim['command'])}`", "", *_simulate_rows(sim)]
        out += ["", *_images(docs, figures, sim, "simulate"), ""]
    return "\n".join(out).rstrip() + "\n"


def _simulate_rows(data: dict) -> list[str]:
    """Per offer mode and decision time: utilisation, each role's wait, offers, conflicts."""
    trace = data["config"]["trace_summary"]
    roles = list(trace["roles"])
    rows = [
        f"Trace: {trace['agents']} agents, {trace['seconds']:g} s, {trace['jobs']} jobs, "
        f"{trace['tasks']} tasks.",
        "",
        "| mode | swept decides (s) | CPU util | "
        + " | ".join(f"{r} wait p50 / p99 (s)" for r in roles)
        + " | offers/s | conflicts | sim CPU (s) |",
        "|---|---:|---:|" + "---:|" * len(roles) + "---:|---:|---:|",
    ]
    for run in data["runs"]:
        waits = []
        for role in roles:
            wait = run["job_wait_seconds"][role]["all"]
            waits.append(f"{wait['p50']} / {wait['p99']}")
        rows.append(
            f"| {run['mode']} | {run['swept_decision_seconds']:g} | "
            f"{run['utilisation'].get('cpus', 0):.1%} | {' | '.join(waits)} | "
            f"{run['offers_per_second']:g} | {run['conflicts']} | {run['cpu_seconds']} |"
        )
    return rows


def _whole_round(figures: dict) -> dict | None:
    """Subscribe -> every agent offered; results written before the first offers and the whole
    round were told apart name it full_allocation_subscribe_to_offers."""
    return figures.get(
        "full_allocation_subscribe_to_all_offers",
        figures.get("full_allocation_subscribe_to_offers"),
    )


def _omega_rows(data: dict) -> list[str]:
    """Per offer mode and service decision time: the batch wait, busyness and conflicts; then
    the gang with and without holds."""
    rows = [
        "| mode | service decision (s) | batch wait p50 / p90 (s) | busyness batch / service | "
        "conflicts batch | conflicts service | service s wasted |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    sweep = [r for r in data["runs"] if r["kind"] == "sweep"]
    for r in sorted(
        sweep, key=lambda r: (r["mode"] != "pessimistic", r["service_decision_seconds"])
    ):
        b, s = r["batch"], r["service"]
        wait = b["job_wait_seconds"]
        rows.append(
            f"| {r['mode']} | {r['service_decision_seconds']:g} | {wait['p50']} / {wait['p90']} "
            f"| {b['busyness']:.3f} / {s['busyness']:.3f} "
            f"| {b['conflicts']}/{b['attempts']} | {s['conflicts']}/{s['attempts']} "
            f"| {s['wasted_decision_seconds']:g} |"
        )
    gangs = [r for r in data["runs"] if r["kind"] == "gang"]
    if gangs:
        rows.append("")
    for g in gangs:
        started = (
            f"started in {g['wait_seconds']:g} s"
            if g["started"]
            else f"did not start within {g['timeout_seconds']:g} s"
        )
        rows.append(
            f"- {g['tasks']}-task gang {'with' if g['holds'] else 'without'} holds "
            f"({g['mode']} mode, cluster {g['busy_cpus_fraction_at_submit']:.0%} busy): "
            f"{started}."
        )
    return rows


def _filesystem_line(run: dict) -> list[str]:
    fs = run.get("work_dir_filesystem")
    if not fs:
        return []
    return [
        f"- agents' work dirs under `{fs['path']}`: creating a sandbox (a directory, two "
        f"files) took p50 {fmt_ms(fs['sandbox_create_ms'])} ms there"
    ]


def _launches_line(run: dict) -> list[str]:
    """How the launches went (runs made before the counts were kept have none)."""
    per = run.get("per_task")
    if not per:
        return []
    return [
        f"- launches: {per['tasks_per_accept']} tasks an Accept; {per['offers']} offers "
        f"and {per['accepts']} Accepts a task"
    ]


def _cpu_table(run: dict) -> list[str]:
    """Where a task's CPU goes, per component, beside a raw spawn of `true`."""
    account = run.get("cpu")
    if not account:
        return []
    rows = [
        "| where (throughput window) | cores | CPU ms per task | share |",
        "|---|---:|---:|---:|",
    ]
    for name, c in account["components"].items():
        if c["cores"] >= 0.0005:
            rows.append(
                f"| {name} | {c['cores']:.3f} | {c['ms_per_task']:.2f} | {c['share']:.0%} |"
            )
    machine = account["machine"]
    rows.append(
        f"| **machine busy** | {machine['busy_cores']:.3f} | {machine['busy_ms_per_task']:.2f} | |"
    )
    raw = run.get("raw_spawn") or {}
    if raw.get("machine_cpu_ms_per_process") is not None:
        # The machine's busy time per process, the same basis as the rows above.
        rows.append(
            f"| raw spawn of `true`, per process | | {raw['machine_cpu_ms_per_process']:.2f} | |"
        )
    return [*rows, ""]


def rewrite(doc: Path, figures: Path) -> None:
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc} lacks the {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{section(doc.parent, figures)}{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agora.experiments.report", description=__doc__)
    p.add_argument("--docs", type=Path, default=Path("docs"), help="docs directory (docs)")
    p.add_argument(
        "--only",
        default=",".join(EXPERIMENTS),
        help="experiments to run, comma-separated (default: all of them)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    p.add_argument(
        "--no-run",
        action="store_true",
        help="only regenerate docs/experiments.md from the results on disk",
    )
    args = p.parse_args(argv)
    figures = args.docs / "figures"
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(names) - set(EXPERIMENTS)
    if unknown:
        p.error(f"unknown experiment(s): {', '.join(sorted(unknown))}")
    if not args.no_run:
        from agora.common import configure_logging

        configure_logging("error")
        asyncio.run(run_all(names, figures, args.quick))
    rewrite(args.docs / "experiments.md", figures)
    print(f"rewrote {args.docs / 'experiments.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
