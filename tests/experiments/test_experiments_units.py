"""Pure parts of the harness: durations, traces, statistics, the recorder's pairing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agora.experiments.emulated.tasks import declared_duration
from agora.experiments.load import Recorder, load_trace, parse_duration
from agora.experiments.results import percentile, summarize
from agora.v1 import common_pb2


def test_durations_parse():
    assert parse_duration("2")() == 2.0
    assert parse_duration("constant:0.5")() == 0.5
    sampler = parse_duration("exp:1", seed=3)
    samples = [sampler() for _ in range(2000)]
    assert 0.9 < sum(samples) / len(samples) < 1.1 and min(samples) >= 0
    for bad in ("fast", "exp:-1", "normal:2", "constant:nan"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_trace_is_read_and_sorted(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("submit_time,duration,cpus,mem\n2,1.5,1,128\n0.5,3,0.5,64\n")
    trace = load_trace(path)
    assert [(t.submit_time, t.duration, t.cpus, t.mem) for t in trace] == [
        (0.5, 3.0, 0.5, 64.0),
        (2.0, 1.5, 1.0, 128.0),
    ]
    path.write_text("submit_time,duration,cpus\n1,1,1\n")
    with pytest.raises(ValueError, match="mem"):
        load_trace(path)
    path.write_text("submit_time,duration,cpus,mem\n1,-1,1,1\n")
    with pytest.raises(ValueError, match=":2"):
        load_trace(path)


def test_emulated_duration_comes_from_label_or_sleep():
    task = common_pb2.TaskInfo(task_id="t", command=common_pb2.CommandInfo(shell="sleep 2.5"))
    assert declared_duration(task) == 2.5
    task.labels["agora.emulated/duration"] = "0.25"
    assert declared_duration(task) == 0.25
    argv = common_pb2.TaskInfo(command=common_pb2.CommandInfo(argv=["sleep", "3"]))
    assert declared_duration(argv) == 3.0
    assert (
        declared_duration(common_pb2.TaskInfo(command=common_pb2.CommandInfo(shell="echo hi")))
        is None
    )


def test_summary_statistics():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    stats = summarize([5, 1, 3, float("nan")])
    assert stats["count"] == 3 and stats["min"] == 1 and stats["max"] == 5 and stats["p50"] == 3
    empty = summarize([])
    assert empty["count"] == 0 and empty["p99"] is None
    assert math.isnan(percentile([], 50))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _offer(agent: str) -> common_pb2.Offer:
    return common_pb2.Offer(offer_id=f"o-{agent}", agent_id=agent)


def test_recorder_pairs_a_freed_agent_with_its_next_offer_from_any_framework():
    clock = Clock()
    rec = Recorder(clock=clock, wall=lambda: clock.now + 900)
    rec.subscribed("a")
    clock.now += 0.004
    rec.offers("a", [_offer("x"), _offer("y")])  # first offer of a: 4 ms
    rec.accepted(["t1"])
    clock.now += 0.010
    rec.update(
        "a",
        common_pb2.TaskStatus(
            task_id="t1", state=common_pb2.TASK_RUNNING, agent_id="x", uuid=b"1" * 16
        ),
    )
    clock.now += 1.0
    ended_at_agent = clock.now + 900 - 0.0005  # the agent stamped it 0.5 ms before we read it
    rec.update(
        "a",
        common_pb2.TaskStatus(
            task_id="t1",
            state=common_pb2.TASK_FINISHED,
            agent_id="x",
            uuid=b"2" * 16,
            timestamp=ended_at_agent,
        ),
    )
    clock.now += 0.002
    rec.offers("b", [_offer("y")])  # not the freed agent
    rec.offers("b", [_offer("x")])  # another framework gets x: 2 ms
    rec.offers("a", [_offer("x")])  # nothing pending for x any more
    assert rec.values("subscribe_to_first_offer") == pytest.approx([4.0])
    assert rec.values("accept_to_running") == pytest.approx([10.0])
    assert rec.values("task_end_to_offer") == pytest.approx([2.0])
    assert rec.values("task_end_agent_to_offer") == pytest.approx([2.5])
    rec.declined("y")
    clock.now += 0.003
    rec.offers("a", [_offer("y")])
    assert rec.values("decline_to_offer") == pytest.approx([3.0])


def test_an_offer_that_overtakes_the_update_counts_zero_and_is_not_paired_again():
    clock = Clock()
    rec = Recorder(clock=clock, wall=lambda: clock.now + 900)
    ended_at_agent = clock.now + 900
    clock.now += 0.003
    rec.offers("b", [_offer("x")])  # the freed resources, read first
    clock.now += 0.001
    rec.update(
        "a",
        common_pb2.TaskStatus(
            task_id="t",
            state=common_pb2.TASK_FINISHED,
            agent_id="x",
            uuid=b"3" * 16,
            timestamp=ended_at_agent,
        ),
    )
    clock.now += 5.0
    rec.offers("b", [_offer("x")])  # much later, unrelated: not paired
    assert rec.values("task_end_to_offer") == [0.0]  # the offer was there first
    assert rec.values("task_end_agent_to_offer") == pytest.approx([3.0])
    assert rec.counts["offer_before_update"] == 1


def test_recorder_join_works_whichever_comes_first():
    clock = Clock()
    rec = Recorder(clock=clock)
    rec.agent_joined("late", register_sent_at=clock.now)
    clock.now += 0.005
    rec.offers("a", [_offer("late")])
    clock.now += 0.001
    rec.offers("a", [_offer("early")])  # the offer beat the news of its registration
    rec.agent_joined("early", register_sent_at=clock.now - 0.003)
    assert sorted(rec.values("join_to_offer")) == pytest.approx([3.0, 5.0])


def test_reconciliation_answers_are_not_task_ends():
    rec = Recorder()
    rec.update(
        "a", common_pb2.TaskStatus(task_id="t", state=common_pb2.TASK_LOST, agent_id="x")
    )  # no uuid: from the master
    rec.offers("a", [_offer("x")])
    assert rec.values("task_end_to_offer") == []


def test_the_catalog_is_the_one_list_of_experiments_and_their_sizes():
    import argparse

    from agora.cli import experiment_cmd
    from agora.experiments.catalog import EXPERIMENTS, parse

    assert list(EXPERIMENTS) == [
        "offer-latency",
        "launch",
        "scale",
        "preemption",
        "fairness",
        "failover",
        "soak",
        "omega",
        "throughput",
        "simulate",
    ]
    parser = argparse.ArgumentParser()
    experiment_cmd.register(parser.add_subparsers(dest="command"))
    for name, experiment in EXPERIMENTS.items():
        # `make experiments` runs exactly what the command line would parse from these sizes.
        for size in (experiment.full, experiment.quick):
            args = parse(name, [*size, "--out", "x"])
            cli = parser.parse_args(["experiment", name, *size, "--out", "x"])
            assert {k: v for k, v in vars(cli).items() if k in vars(args)} == vars(args)
            assert callable(experiment.build(args))


def test_a_runs_scratch_is_never_under_tmp_which_namespaced_tasks_do_not_share(
    monkeypatch, tmp_path
):
    from agora.experiments.processes import scratch_dir

    for tmpdir in ("", "/tmp", "/tmp/pytest-x"):
        monkeypatch.setenv("TMPDIR", tmpdir)
        made = scratch_dir("agora-test-")
        try:
            assert made.parent == Path("/var/tmp") and made.is_dir()
        finally:
            made.rmdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert scratch_dir("agora-test-").parent == tmp_path
