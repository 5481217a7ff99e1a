"""`agora bench streams`: a bare grpc.aio server's memory per open stream (the floor under the
master's memory per agent) at a small size, through the command as a user runs it."""

from __future__ import annotations

import json

from experiments_helpers import run_agora as agora


def test_streams_bench_opens_every_stream_and_reports_the_memory_each_costs():
    done = agora("bench", "streams", "--streams", "400", "--per-connection", "50", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["streams"] == 400 and result["streams_per_connection"] == 50
    assert result["rss_mb_open"] > result["rss_mb_before"]
    assert result["kb_per_stream"] > 0
    table = agora("bench", "streams", "--streams", "100")
    assert table.returncode == 0, table.stderr
    assert "per stream" in table.stdout and "100 open" in table.stdout


def test_streams_bench_refuses_a_bad_count_in_one_line():
    done = agora("bench", "streams", "--streams", "0")
    assert done.returncode != 0
    assert "must be 1 or more" in done.stderr
    assert "Traceback" not in done.stderr
