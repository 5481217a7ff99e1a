"""`agora bench hops`: a message's latency across two bare gRPC hops (the floor under the offer
latency), at a small size, through the command as a user runs it."""

from __future__ import annotations

import json

from experiments_helpers import run_agora as agora


def test_hops_bench_times_every_message_across_both_hops():
    done = agora("bench", "hops", "--messages", "30", "--rate", "200", "--size", "64", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["messages"] == 30 and result["received"] == 30
    assert result["bytes"] == 64 and result["rate_per_second"] == 200
    latency = result["latency_ms"]
    assert latency["count"] == 30
    assert 0 < latency["min"] <= latency["p50"] <= latency["p99"] <= latency["max"]
    table = agora("bench", "hops", "--messages", "10", "--rate", "200")
    assert table.returncode == 0, table.stderr
    assert "10 of 10 messages" in table.stdout and "p50" in table.stdout


def test_hops_bench_refuses_bad_figures_in_one_line():
    for argv, said in (
        (["--rate", "0"], "must be more than 0"),
        (["--rate", "nan"], "must be more than 0"),
        (["--messages", "0"], "must be 1 or more"),
        (["--size", "4"], "at least 8 bytes"),
    ):
        done = agora("bench", "hops", *argv)
        assert done.returncode != 0, argv
        assert said in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
