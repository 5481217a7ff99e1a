"""agora experiment omega: its statistics (pure), its job scheduler against an in-memory master,
and the whole experiment, tiny, against the real master."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest
from experiments_helpers import load_results, run_experiment

from agora.common.errors import Reason
from agora.experiments.omega_frameworks import JobScheduler, JobStream
from agora.experiments.omega_gang import GangFramework
from agora.experiments.omega_stats import (
    CONFLICT,
    LAUNCHED,
    Ledger,
    busyness,
    framework_figures,
    jobs_per_second,
    ratio,
    wasted_seconds,
)
from agora.frameworks.sdk import Driver, framework_info
from agora.frameworks.sdk.testing import MemoryTransport, make_offer, offers_event, subscribed

# statistics -----------------------------------------------------------------------------------


def test_job_waits_count_unlaunched_jobs_with_their_wait_so_far():
    ledger = Ledger()
    ledger.submitted("batch", "a", 2, at=10.0)
    ledger.job_launched("a", 10.5)
    ledger.submitted("batch", "b", 1, at=12.0)  # never launched: 20 - 12 = 8 s so far
    ledger.submitted("batch", "early", 1, at=1.0)  # before the window
    ledger.job_launched("early", 1.1)
    ledger.submitted("service", "s", 3, at=11.0)
    figures = framework_figures(ledger, "batch", (5.0, 15.0), end=20.0)
    assert figures["jobs"] == 2 and figures["not_launched"] == 1
    assert figures["job_wait_seconds"]["min"] == 0.5
    assert figures["job_wait_seconds"]["max"] == 8.0


def test_busyness_cuts_decisions_at_the_window():
    ledger = Ledger()
    ledger.decided("service", "j1", started=0.0, seconds=10.0)  # 5 s of it in the window
    ledger.decided("service", "j2", started=12.0, seconds=2.0)
    ledger.decided("batch", "j3", started=6.0, seconds=1.0)
    # window 5-15 (10 s): service 5 + 2 = 7 s busy, batch 1 s.
    assert busyness(ledger.decisions, "service", (5.0, 15.0)) == pytest.approx(0.7)
    assert busyness(ledger.decisions, "batch", (5.0, 15.0)) == pytest.approx(0.1)
    assert math.isnan(busyness(ledger.decisions, "batch", (5.0, 5.0)))


def test_wasted_work_is_the_conflicted_attempts_share_of_a_decision():
    ledger = Ledger()
    d = ledger.decided("service", "j1", started=0.0, seconds=4.0)
    ledger.attempted(d, 4.0, 2, LAUNCHED)
    ledger.attempted(d, 4.0, 2, CONFLICT, Reason.OFFER_CONFLICT)
    ledger.attempted(d, 4.0, 1, CONFLICT, "RESCINDED")
    ledger.attempted(d, 4.0, 1, LAUNCHED)
    clean = ledger.decided("service", "j2", started=5.0, seconds=1.0)
    ledger.attempted(clean, 6.0, 1, LAUNCHED)
    # 4 s over 4 attempts, 2 of them conflicted: 2 s wasted; the clean decision wastes none.
    assert wasted_seconds(ledger.decisions, "service", (0.0, 10.0)) == pytest.approx(2.0)
    figures = framework_figures(ledger, "service", (0.0, 10.0), end=10.0)
    assert (figures["attempts"], figures["conflicts"]) == (5, 2)
    assert figures["conflict_fraction"] == pytest.approx(0.4)
    assert figures["conflicts_by_reason"] == {"OFFER_CONFLICT": 1, "RESCINDED": 1}


def test_arrival_rate_from_load_and_ratio():
    # 64 CPUs at 30%: 19.2 CPUs busy; a job holds 2.5 tasks x 0.5 CPUs x 4 s = 5 CPU-seconds.
    assert jobs_per_second(0.3, 64, 0.5, 2.5, 4.0) == pytest.approx(3.84)
    assert ratio(3.0, 1.5) == 2.0
    assert ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


# the job scheduler, with the test playing the master --------------------------------------------


def _stream(decision: float) -> JobStream:
    # Practically no arrivals of its own: the test submits the job.
    return JobStream("service", 1e-9, 2, 2, 1.0, 1024.0, 10.0, decision)


async def test_a_conflict_is_counted_as_wasted_work_and_the_job_decided_again():
    ledger = Ledger()
    scheduler = JobScheduler(_stream(0.02), ledger)
    transport = MemoryTransport()
    driver = Driver(scheduler, transport, framework_info("service"))
    running = asyncio.create_task(driver.run())
    try:
        stream = await transport.next_stream()
        stream.send(subscribed("fw-1"))
        await transport.next_call("Suppress")  # no job yet
        job = scheduler.submit()
        scheduler.wake()
        await transport.next_call("Revive")
        transport.fail_next("Accept", grpc.StatusCode.ABORTED, "taken first", Reason.OFFER_CONFLICT)
        stream.send(offers_event(make_offer("o1", "a1", "cpus:4;mem:4096")))
        _, first = await transport.next_call("Accept")
        _, declined = await transport.next_call("Decline")  # the void offer goes back
        assert list(declined.offer_ids) == ["o1"]
        stream.send(offers_event(make_offer("o2", "a1", "cpus:2;mem:2048")))
        _, second = await transport.next_call("Accept")
        assert list(second.offer_ids) == ["o2"]
        # The same two tasks, decided again.
        ids = [t.task_id for t in first.operations[0].launch.task_infos]
        assert [t.task_id for t in second.operations[0].launch.task_infos] == ids
        await transport.next_call("Suppress")  # nothing left to run
    finally:
        driver.stop()
        await scheduler.close()
        await running
    assert ledger.jobs[job.job_id].launched is not None
    figures = framework_figures(ledger, "service", (0.0, math.inf), end=math.inf)
    assert (figures["decisions"], figures["attempts"], figures["conflicts"]) == (2, 2, 1)
    assert figures["conflicts_by_reason"] == {"OFFER_CONFLICT": 1}
    assert figures["wasted_decision_seconds"] >= 0.02  # the first decision, all of it


async def test_gang_without_holds_launches_only_on_a_round_that_fits_it_all():
    gang = GangFramework(4, 1.0, 512.0, holds=False, timeout_seconds=10, refuse_seconds=0.05)
    transport = MemoryTransport()
    driver = Driver(gang, transport, framework_info("gang"))
    running = asyncio.create_task(driver.run())
    try:
        stream = await transport.next_stream()
        stream.send(subscribed("fw-1"))
        await transport.next_call("Suppress")
        await gang.submit()
        await transport.next_call("Revive")
        stream.send(offers_event(make_offer("o1", "a1", "cpus:3;mem:4096")))
        _, declined = await transport.next_call("Decline")
        assert declined.filters.refuse_seconds == pytest.approx(0.05)
        await transport.next_call("Revive")  # realigned when the filter runs out
        stream.send(
            offers_event(
                make_offer("o2", "a1", "cpus:3;mem:4096"), make_offer("o3", "a2", "cpus:1;mem:512")
            )
        )
        launched = [await transport.next_call("Accept") for _ in range(2)]
        await asyncio.wait_for(gang.done.wait(), 5)
    finally:
        driver.stop()
        await gang.close()
        await running
    assert sum(len(r.operations[0].launch.task_infos) for _, r in launched) == 4
    assert gang.outcome.rounds == 2 and gang.outcome.best_round == 4
    assert gang.outcome.wait is not None and not gang.outcome.error


# the experiment, tiny, through the real master ------------------------------------------------


@pytest.mark.e2e
def test_omega_sweeps_decision_times_in_both_modes_and_times_the_gang(tmp_path):
    out = tmp_path / "omega"
    run_experiment(
        "omega",
        "--agents", "4",
        "--decision-times", "0.01,0.2",
        "--modes", "pessimistic,optimistic",
        "--seconds", "2",
        "--warmup", "0.5",
        "--grace", "1",
        "--batch-load", "0.5",
        "--gang-tasks", "16",
        "--gang-load", "0.5",
        "--gang-warmup", "1.5",
        "--gang-timeout", "5",
        "--out", str(out),
    )  # fmt: skip
    data = load_results(out, "omega")
    sweep = [r for r in data["runs"] if r["kind"] == "sweep"]
    assert sorted((r["mode"], r["service_decision_seconds"]) for r in sweep) == [
        ("optimistic", 0.01),
        ("optimistic", 0.2),
        ("pessimistic", 0.01),
        ("pessimistic", 0.2),
    ]
    for run in sweep:
        batch = run["batch"]
        assert batch["jobs"] > 0 and batch["job_wait_seconds"]["count"] == batch["jobs"]
        assert batch["job_wait_seconds"]["p50"] is not None
        for framework in ("batch", "service"):
            figures = run[framework]
            assert 0.0 <= figures["busyness"] <= 1.0
            assert isinstance(figures["conflicts"], int) and figures["attempts"] >= 0
            assert 0.0 <= figures["conflict_fraction"] <= 1.0
            assert figures["wasted_decision_seconds"] >= 0.0
        if run["mode"] == "pessimistic":  # offers are exclusive: nobody can be first
            assert run["batch"]["conflicts"] == run["service"]["conflicts"] == 0
    gangs = {r["holds"]: r for r in data["runs"] if r["kind"] == "gang"}
    assert set(gangs) == {True, False}
    assert gangs[True]["started"] and gangs[True]["wait_seconds"] is not None, gangs[True]
    assert gangs[False]["started"] or gangs[False]["wait_seconds"] is None
    names = {t["name"] for t in data["targets"]}
    assert any("optimistic" in n for n in names) and any("holds" in n for n in names)
    assert {
        "omega_batch_wait.png",
        "omega_busyness.png",
        "omega_conflicts.png",
        "omega_gang.png",
    } <= set(data["plots"])
    summary = (out / "summary.md").read_text()
    assert "## What the plots show" in summary and "Conflicts, optimistic" in summary
