"""The simulator's parts as units: its clock, the trace reader, the generator, the DRF optimum,
and the engine on traces small enough to work out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from agora.experiments.drf import drf_optimum
from agora.experiments.simulate.clock import VirtualClock
from agora.experiments.simulate.engine import SimConfig, Simulation
from agora.experiments.simulate.figures import run_figures
from agora.experiments.simulate.generator import SERVICE, Shape, generate, rates
from agora.experiments.simulate.metrics import size_class
from agora.experiments.simulate.trace import (
    Cluster,
    Job,
    Trace,
    TraceError,
    parse_lines,
    read_trace,
    write_trace,
)

# --- the clock ---------------------------------------------------------------------------


def test_the_clock_runs_events_in_time_order_and_ties_in_the_order_set():
    clock = VirtualClock()
    seen = []
    clock.at(5.0, lambda: seen.append(("b", clock.now)))
    clock.at(1.0, lambda: seen.append(("a", clock.now)))
    clock.at(5.0, lambda: seen.append(("c", clock.now)))
    clock.run_until(10.0)
    assert seen == [("a", 1.0), ("b", 5.0), ("c", 5.0)]
    assert clock.now == 10.0  # it jumps to the end: nothing was due in between


def test_the_clock_leaves_later_events_and_runs_what_events_schedule():
    clock = VirtualClock()
    seen = []
    clock.at(1.0, lambda: clock.after(0.5, lambda: seen.append(clock.now)))
    clock.at(7.0, lambda: seen.append("late"))
    clock.run_until(2.0)
    assert seen == [1.5]
    assert clock.next_due() == 7.0


def test_the_clock_runs_a_past_time_now_and_refuses_nan():
    clock = VirtualClock(start=3.0)
    seen = []
    clock.at(1.0, lambda: seen.append(clock.now))
    clock.run_until(3.0)
    assert seen == [3.0]
    with pytest.raises(ValueError, match="nan"):
        clock.at(math.nan, lambda: None)


# --- the trace file --------------------------------------------------------------------------

HEADER = {
    "agora_trace": 1,
    "agents": 2,
    "agent": {"cpus": 2, "mem": 1024},
    "roles": {"a": 1, "b": 2},
    "seconds": 60,
}


def lines(*jobs: dict, header: dict = HEADER) -> list[str]:
    return [json.dumps(header), *(json.dumps(j) for j in jobs)]


def job(**fields) -> dict:
    base = {"job": "j1", "at": 1, "role": "a", "tasks": 2, "cpus": 1, "mem": 128, "duration": 5}
    return {**base, **fields}


def test_a_trace_is_written_and_read_back_the_same(tmp_path):
    trace = Trace(
        Cluster(3, {"cpus": 4.0, "mem": 2048.0}, {"a": 1.0, "b": 3.0}, 120.0),
        [
            Job("x", 0.5, "a", 2, {"cpus": 1.0, "mem": 256.0}, 10.0),
            Job("y", 2.0, "b", 1, {"cpus": 0.5, "mem": 64.0}, 3.5, priority=5),
        ],
    )
    path = tmp_path / "t.jsonl"
    write_trace(trace, path)
    assert read_trace(path) == trace


def test_the_reader_sorts_jobs_by_arrival_and_skips_comments():
    trace = parse_lines([*lines(job(job="late", at=9), job(job="early", at=2)), "# a comment", ""])
    assert [j.job for j in trace.jobs] == ["early", "late"]
    assert trace.tasks == 4


@pytest.mark.parametrize(
    "text, message",
    [
        (lines(job(role="c")), r"t:2: role 'c' is not one of the cluster's roles \(a, b\)"),
        (lines(job(cpus=3)), "asks for cpus 3, more than an agent has"),
        (lines(job(), job()), "job 'j1' appears twice"),
        (lines(job(tasks=0)), "tasks must be in 1..1000000, got 0"),
        (lines(job(duration=-1)), "duration must be at least 0"),
        (lines(job(cpus=0, mem=0)), "give at least one of cpus"),
        ([json.dumps(HEADER), "{not json"], "t:2: not JSON"),
        ([json.dumps({"agents": 2})], "t:1: the first line must describe the cluster"),
        ([], "empty"),
    ],
)
def test_a_bad_trace_is_refused_with_its_line_and_what_to_write(text, message):
    with pytest.raises(TraceError, match=message):
        parse_lines(text, "t")


def test_a_missing_trace_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="No such file"):
        read_trace(tmp_path / "absent.jsonl")


# --- the generator -------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    shape = Shape(agents=20, seconds=3600, seed=7)
    assert generate(shape) == generate(shape)
    assert generate(Shape(agents=20, seconds=3600, seed=8)).jobs != generate(shape).jobs


def test_generated_jobs_are_heavy_tailed_with_service_holding_most_cpu_seconds():
    trace = generate(Shape(agents=500, seconds=86400, seed=3))
    batch = [j for j in trace.jobs if j.role == "batch"]
    service = [j for j in trace.jobs if j.role == SERVICE]
    sizes = sorted(j.tasks for j in batch)
    assert sum(1 for s in sizes if s == 1) / len(sizes) > 0.4  # most are one task...
    assert sizes[-1] >= 1000  # ...and a few are huge
    durations = sorted(j.duration for j in batch)
    assert durations[len(durations) // 2] < 3600 < durations[-1]  # most short, a long tail
    assert len(batch) > 0.8 * len(trace.jobs)  # Omega: over 80% of jobs are batch

    def work(jobs):
        return sum(j.tasks * j.cpus * min(j.duration, trace.cluster.seconds) for j in jobs)

    assert work(service) > work(batch)  # while service jobs hold most of the CPU-seconds
    figures = rates(trace)
    # Within a few times the Google trace's rates per machine per day.
    assert 0.5 < figures["jobs_per_agent_day"] / figures["google_jobs_per_machine_day"] < 6
    assert 0.5 < figures["tasks_per_agent_day"] / figures["google_tasks_per_machine_day"] < 4


def test_a_shape_out_of_range_is_refused():
    with pytest.raises(ValueError, match="load"):
        Shape(load=0)


# --- the DRF optimum -----------------------------------------------------------------------


def test_the_drf_optimum_of_the_papers_example():
    # DRF paper: 9 CPUs, 18 GB; A's tasks <1 CPU, 4 GB>, B's <3 CPUs, 1 GB>, both wanting
    # more than there is: A gets 3 tasks (12/18 of the memory), B 2 (6/9 of the CPUs).
    shares = drf_optimum(
        {"A": 1.0, "B": 1.0},
        {"A": {"cpus": 100, "mem": 400}, "B": {"cpus": 300, "mem": 100}},
        {"cpus": 9, "mem": 18},
    )
    assert shares == pytest.approx({"A": 2 / 3, "B": 2 / 3})


def test_the_drf_optimum_caps_a_role_at_its_demand_and_gives_the_rest_by_weight():
    capacity = {"cpus": 10, "mem": 100}
    # a wants 10% of the CPUs: it gets that; b and c (weight 2) share the rest 1:2.
    shares = drf_optimum(
        {"a": 1, "b": 1, "c": 2},
        {"a": {"cpus": 1}, "b": {"cpus": 50}, "c": {"cpus": 50}, "d": {}},
        capacity,
    )
    assert shares["a"] == pytest.approx(0.1)
    assert shares["b"] == pytest.approx(0.3)
    assert shares["c"] == pytest.approx(0.6)
    assert drf_optimum({"x": 1}, {}, capacity) == {"x": 0.0}


def test_size_classes():
    assert [size_class(n) for n in (1, 2, 10, 11, 100, 101, 1000, 1001)] == [
        "1",
        "2-10",
        "2-10",
        "11-100",
        "11-100",
        "101-1000",
        "101-1000",
        ">1000",
    ]


# --- the engine ---------------------------------------------------------------------------


def small_trace(*jobs: Job, agents: int = 2, cpus: float = 2.0, seconds: float = 60.0):
    return Trace(
        Cluster(agents, {"cpus": cpus, "mem": 4096.0}, {"a": 1.0, "b": 1.0}, seconds), list(jobs)
    )


def test_a_job_that_fits_starts_after_one_offer_round_and_runs_its_duration():
    # 4 tasks of 1 cpu on 2 agents of 2 cpus, arriving at 10.5 s (between two sweeps: no
    # batching delay), running 20 s: the framework revives (1 message), is offered (1
    # message), places all 4 in 5 ms and accepts (1 message).
    trace = small_trace(Job("j", 10.5, "a", 4, {"cpus": 1.0, "mem": 256.0}, 20.0))
    sim = Simulation(trace, SimConfig(latency_seconds=0.001, job_decision=0.005, task_decision=0))
    recorder = sim.run()
    record = recorder.jobs["j"]
    assert record.launched == pytest.approx(10.5 + 0.001 * 3 + 0.005)
    figures = run_figures(recorder, 60.0, ["a", "b"])
    assert figures["utilisation"]["cpus"] == pytest.approx(20 / 60, abs=1e-4)  # 4 cpus, 20 s
    assert figures["tasks_launched"] == 4
    assert sim.running_tasks == 0  # all ended, and their resources went back
    assert sim.alloc.free("agent-000000").scalar("cpus") == 2.0


@pytest.mark.parametrize("sized", [True, False], ids=["sized", "unsized"])
def test_a_small_job_on_a_big_cluster_is_offered_what_covers_it(sized):
    # One task of 1 cpu on 100 agents of 2 cpus. Said what it waits for, the framework is
    # offered one agent; without (--unsized-offers, Mesos' way) the revive offers all 100,
    # and it declines 99. The job starts as soon either way.
    trace = small_trace(Job("j", 10.5, "a", 1, {"cpus": 1.0, "mem": 256.0}, 5.0), agents=100)
    config = SimConfig(job_decision=0.005, task_decision=0, sized_offers=sized)
    recorder = Simulation(trace, config).run()
    assert recorder.jobs["j"].launched == pytest.approx(10.5 + 0.003 + 0.005)
    assert recorder.offers == (1 if sized else 100)


def test_scraps_too_small_for_any_waiting_task_are_not_offered():
    # Two agents of 2 cpus; a's job takes 1.5 cpus of each, then b's 1-cpu job waits: with
    # wants, the 0.5-cpu scraps are never offered to b (nor declined by it, again and again).
    trace = small_trace(
        Job("big", 1.0, "a", 2, {"cpus": 1.5, "mem": 256.0}, 30.0),
        Job("small", 2.0, "b", 1, {"cpus": 1.0, "mem": 256.0}, 5.0),
    )
    sized = Simulation(trace, SimConfig(job_decision=0, task_decision=0)).run()
    unsized = Simulation(
        trace, SimConfig(job_decision=0, task_decision=0, sized_offers=False)
    ).run()
    for recorder in (sized, unsized):
        assert recorder.jobs["small"].launched == pytest.approx(31.003, abs=0.01)
    assert sized.offers < unsized.offers


def test_mesos_interval_mode_waits_for_the_next_tick():
    trace = small_trace(Job("j", 10.2, "a", 1, {"cpus": 1.0, "mem": 256.0}, 5.0))
    config = SimConfig(mode="interval", job_decision=0, task_decision=0)
    recorder = Simulation(trace, config).run()
    # The revive lands at 10.201; the timer's next cycle is at 11.0, then two messages.
    assert recorder.jobs["j"].launched == pytest.approx(11.0 + 0.002, abs=1e-6)


def test_a_job_too_big_for_the_free_room_waits_for_running_tasks_to_end():
    trace = small_trace(
        Job("first", 1.5, "a", 4, {"cpus": 1.0, "mem": 256.0}, 30.0),
        Job("second", 2.5, "b", 2, {"cpus": 1.0, "mem": 256.0}, 5.0),
    )
    recorder = Simulation(trace, SimConfig(job_decision=0, task_decision=0)).run()
    assert recorder.jobs["first"].launched == pytest.approx(1.503)
    launched = recorder.jobs["second"].launched
    assert launched is not None and 31.503 < launched < 31.51  # when the first job's end


def test_optimistic_offers_give_a_slow_framework_below_its_share_priority_then_conflict():
    # Both roles are offered the one agent at once; b decides in 10 ms, a in 5 s. b's first
    # Accepts would take all of it above b's fair share while a, below its own, was offered
    # the room less than the 0.5 s grace ago: refused (the master's BELOW_SHARE_PRIORITY).
    # After the grace b commits; a's Accept then finds the room taken and conflicts, and its
    # job waits until b's tasks end.
    trace = small_trace(
        Job("slow", 1.0, "a", 2, {"cpus": 1.0, "mem": 256.0}, 10.0),
        Job("quick", 1.0, "b", 2, {"cpus": 1.0, "mem": 256.0}, 10.0),
        agents=1,
    )
    config = SimConfig(mode="optimistic", role_job_decision={"a": 5.0, "b": 0.01}, task_decision=0)
    sim = Simulation(trace, config)
    recorder = sim.run()
    assert recorder.priority_refusals >= 1
    assert recorder.conflicts >= 1
    quick = recorder.jobs["quick"].launched
    assert quick is not None and 1.5 <= quick < 1.6
    slow = recorder.jobs["slow"].launched
    assert slow is not None and slow > quick + 10.0
    pessimistic = Simulation(trace, SimConfig(role_job_decision=config.role_job_decision)).run()
    assert pessimistic.conflicts == 0 and pessimistic.priority_refusals == 0


def test_a_role_starved_below_its_share_preempts_after_its_timeout():
    # a fills both agents with long tasks; b arrives at 5 s wanting 2 cpus. Without
    # preemption b waits until a's tasks end (at about 101 s); with a 10 s fair-share timeout
    # the master's own plan stops two of a's tasks (the youngest, on one agent) soon after
    # 15 s, b runs there, and a's stopped tasks wait again and run once room comes back.
    trace = small_trace(
        Job("long", 1.0, "a", 4, {"cpus": 1.0, "mem": 256.0}, 100.0),
        Job("b-job", 5.0, "b", 2, {"cpus": 1.0, "mem": 256.0}, 10.0),
        seconds=400.0,
    )
    plain = Simulation(trace, SimConfig(job_decision=0, task_decision=0)).run()
    assert plain.preemptions == 0
    assert plain.jobs["b-job"].launched > 100.0

    sim = Simulation(trace, SimConfig(job_decision=0, task_decision=0, preemption_timeout=10.0))
    recorder = sim.run()
    launched = recorder.jobs["b-job"].launched
    assert launched is not None and 15.0 <= launched < 17.0
    assert recorder.preemptions == 2
    assert recorder.preempted == {"a": 2, "b": 0} and recorder.preempted_for == {"a": 0, "b": 2}
    # a's stopped tasks ran again, to the end: every task of the trace finished, and the books
    # balance (nothing allocated anywhere once all ended).
    assert recorder.tasks_launched == 4 + 2 + 2
    assert recorder.jobs["long"].launched > launched
    assert sim.running_tasks == 0 and not sim._running
    for agent_id in sim.agent_ids:
        assert sim.alloc.free(agent_id) == sim.total, agent_id
    figures = run_figures(recorder, 400.0, ["a", "b"])
    assert figures["preemptions"] == 2 and figures["preempted"] == {"a": 2, "b": 0}


def test_a_role_at_its_fair_share_is_not_preempted_for():
    # Each role holds half the cluster and wants more: neither is below its fair share, so
    # nothing is stopped however long they wait.
    many = {"cpus": 1.0, "mem": 256.0}
    trace = small_trace(
        Job("a1", 1.0, "a", 2, many, 100.0),
        Job("b1", 1.0, "b", 2, many, 100.0),
        Job("a2", 2.0, "a", 2, many, 10.0),
        Job("b2", 2.0, "b", 2, many, 10.0),
        seconds=300.0,
    )
    recorder = Simulation(trace, SimConfig(preemption_timeout=1.0)).run()
    assert recorder.preemptions == 0


def test_the_books_balance_after_conflicts_and_declines():
    # A contended trace in optimistic mode with a slow framework: many conflicts and
    # declines; once every task has ended, nothing is allocated or offered anywhere.
    trace = generate(
        Shape(
            agents=10,
            agent_cpus=4,
            agent_mem=16384,
            seconds=300,
            load=1.5,
            duration_scale=0.01,
            max_tasks=20,
            seed=5,
        )
    )
    # Run on long after the last arrival, until every task has had time to end.
    drain = 2 * sum(j.duration for j in trace.jobs) + 300
    trace.cluster = Cluster(10, trace.cluster.agent, trace.cluster.roles, drain)
    config = SimConfig(mode="optimistic", role_job_decision={"service": 2.0})
    sim = Simulation(trace, config)
    recorder = sim.run()
    assert recorder.conflicts + recorder.priority_refusals > 0
    assert sim.running_tasks == 0 and recorder.tasks_launched == trace.tasks
    for agent_id in sim.agent_ids:
        assert sim.alloc.free(agent_id) == sim.total, agent_id
    assert all(not live for live in sim._live.values())


def test_shares_follow_the_drf_optimum_when_both_roles_want_more_than_there_is():
    many = {"cpus": 1.0, "mem": 256.0}
    trace = small_trace(
        Job("a-big", 1.0, "a", 40, many, 100.0),
        Job("b-big", 1.0, "b", 40, many, 100.0),
        agents=4,
        cpus=4.0,
        seconds=50.0,
    )
    recorder = Simulation(trace, SimConfig()).run()
    last = recorder.samples[-1]
    assert last["share_a"] == pytest.approx(0.5)
    assert last["optimum_a"] == pytest.approx(0.5)
    figures = run_figures(recorder, 50.0, ["a", "b"])
    assert figures["fairness_gap"]["a"] is not None and figures["fairness_gap"]["a"] < 0.05


# --- the command ----------------------------------------------------------------------------


def agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args], capture_output=True, text=True, timeout=300
    )


def test_agora_experiment_simulate_compares_the_modes_and_keeps_its_trace(tmp_path):
    out, kept = tmp_path / "out", tmp_path / "trace.jsonl"
    result = agora(
        "experiment",
        "simulate",
        "--agents",
        "30",
        "--hours",
        "0.1",
        "--decision-times",
        "0.01,1",
        "--write-trace",
        str(kept),
        "--out",
        str(out),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "results.json").read_text())
    runs = {(r["mode"], r["swept_decision_seconds"]) for r in data["runs"]}
    assert runs == {(m, d) for m in ("pessimistic", "optimistic", "interval") for d in (0.01, 1)}
    assert all(r["tasks_launched"] > 0 for r in data["runs"])
    for plot in ("job_wait.png", "busyness.png", "conflicts.png", "utilisation.png", "shares.png"):
        assert (out / plot).stat().st_size > 0
    assert "| interval | 1 |" in (out / "summary.md").read_text()
    # The kept trace replays to the same figures.
    again = agora(
        "experiment",
        "simulate",
        "--trace",
        str(kept),
        "--modes",
        "interval",
        "--decision-times",
        "1",
        "--out",
        str(tmp_path / "again"),
        "--quiet",
    )
    assert again.returncode == 0, again.stderr
    rerun = json.loads((tmp_path / "again" / "results.json").read_text())["runs"][0]
    first = next(
        r for r in data["runs"] if r["mode"] == "interval" and r["swept_decision_seconds"] == 1
    )
    assert rerun["utilisation"] == first["utilisation"]
    assert rerun["job_wait_seconds"] == first["job_wait_seconds"]


def test_agora_experiment_simulate_preempts_when_asked_and_says_so(tmp_path):
    """--preemption-timeout through the command: a loaded cluster has tasks preempted, the
    summary says preemption was on and counts them; a negative timeout is one line."""
    out = tmp_path / "out"
    result = agora(
        "experiment", "simulate", "--agents", "30", "--hours", "0.25", "--load", "1.4",
        "--modes", "pessimistic", "--decision-times", "0.01", "--preemption-timeout", "20",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["preemptions"] > 0
    assert (
        sum(run["preempted"].values()) == sum(run["preempted_for"].values()) == run["preemptions"]
    )
    summary = (out / "summary.md").read_text()
    assert "Preemption: for a role starved below its fair share for 20 s" in summary
    assert f"| {run['preemptions']} (" in summary
    bad = agora(
        "experiment", "simulate", "--preemption-timeout", "-5", "--out", str(tmp_path / "x")
    )
    assert bad.returncode != 0 and "--preemption-timeout must be 0 or more" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_bad_trace_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(HEADER) + "\n" + json.dumps(job(role="nobody")) + "\n")
    # (the header's roles are a and b)
    result = agora("experiment", "simulate", "--trace", str(bad), "--out", str(tmp_path / "o"))
    assert result.returncode != 0
    assert "role 'nobody' is not one of the cluster's roles" in result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_stops_a_long_simulation_within_a_simulated_minute(tmp_path):
    import signal

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agora.cli.main",
            "experiment",
            "simulate",
            "--agents",
            "300",
            "--hours",
            "24",
            "--out",
            str(tmp_path / "o"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first progress line: a simulation is running
            if "of the trace" in line:
                break
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)  # a simulated minute takes far less
        assert code != 0  # stopped, not finished: a day of 300 agents takes minutes
        assert not (tmp_path / "o" / "results.json").exists()
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_a_log_plot_of_nothing_measured_is_drawn_not_refused(tmp_path):
    """A run where a role launched no job has only gaps (nan) to plot: the plot is drawn on
    linear axes instead of failing the whole report (a 20-agent, --load 1.4 run did)."""
    from agora.experiments import plots

    nan = float("nan")
    name = plots.lines(
        tmp_path / "waits.png", "t", "x", "y", [("none", [0.01, 0.1], [nan, nan])],
        logx=True, logy=True,
    )  # fmt: skip
    assert (tmp_path / name).stat().st_size > 0


# --- a role's queue ------------------------------------------------------------------------


def test_the_queue_keeps_its_demand_and_smallest_task_as_jobs_come_launch_and_go():
    """demand() and smallest() are kept as they go (a revive asks for both with every job):
    they equal a count over the waiting jobs after every step of a random run."""
    import random

    from agora.experiments.simulate.queue import Placed, TraceQueue
    from agora.frameworks.batch.placement import AgentLaunch, Plan, Want

    rng = random.Random(7)
    queue = TraceQueue("batch")
    given: list[Placed] = []

    def expected() -> tuple[dict[str, float], tuple[float, float]]:
        demand: dict[str, float] = {}
        cpus = mem = math.inf
        for w in queue.jobs.values():
            for name, amount in w.job.resources.items():
                demand[name] = demand.get(name, 0.0) + amount * w.left
            cpus = min(cpus, w.job.cpus)
            mem = min(mem, w.job.resources["mem"])
        return {n: round(v, 3) for n, v in demand.items() if v > 0}, (cpus, mem)

    for step in range(400):
        roll = rng.random()
        if roll < 0.4 or not queue.jobs:
            cpus = rng.choice((0.25, 0.5, 1.0, 2.0))
            job = Job(
                f"j{step}",
                0.0,
                "batch",
                rng.randint(1, 6),
                {"cpus": cpus, "mem": rng.randint(64, 512)},
                10.0,
            )
            queue.arrive(job)
        elif roll < 0.85:  # a round launches some tasks of one job
            w = rng.choice(list(queue.jobs.values()))
            count = rng.randint(1, w.left)
            wants = [Want(w.job.job, w.next_index + i, None) for i in range(count)]  # type: ignore[arg-type]
            placed = queue.take(Plan([AgentLaunch("a1", [], [], wants)], []))
            if rng.random() < 0.3:
                given.extend(placed)
        elif given:  # an optimistic conflict: planned tasks wait again
            queue.give_back(given.pop())
        demand, smallest = expected()
        assert {n: round(v, 3) for n, v in queue.demand().items()} == demand
        assert queue.smallest() == smallest
