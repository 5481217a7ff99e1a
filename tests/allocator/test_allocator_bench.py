"""Smoke test of `agora bench allocator` at a tiny size: it runs and reports every figure."""

from __future__ import annotations

import argparse
import json

import pytest

from agora.cli import bench_cmd


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="agora")
    bench_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_bench_allocator_json_has_the_figures(capsys):
    code, out = run_cli(
        [
            "bench",
            "allocator",
            "--agents",
            "50",
            "--frameworks",
            "5",
            "--json",
            "--cycles",
            "2",
            "--reoffers",
            "5",
        ],
        capsys,
    )
    assert code == 0
    result = json.loads(out)
    assert result["agents"] == 50 and result["frameworks"] == 5
    assert result["first_cycle_offers"] == 50
    for key in ("cycle_ms", "reoffer_ms"):
        assert set(result[key]) == {"min", "median", "max"}
        assert 0 <= result[key]["min"] <= result[key]["median"] <= result[key]["max"]
    assert result["peak_rss_mb"] > 0


def test_bench_allocator_table_with_roles_and_declines(capsys):
    code, out = run_cli(
        [
            "bench",
            "allocator",
            "--agents",
            "50",
            "--frameworks",
            "5",
            "--roles",
            "3",
            "--cycles",
            "2",
            "--reoffers",
            "3",
            "--refuse-seconds",
            "1e9",
        ],
        capsys,
    )
    assert code == 0
    assert "declined for 1e+09 s" in out
    assert "median" in out and "re-offer" in out and "peak memory" in out


def test_bench_allocator_times_what_preemption_adds(capsys):
    argv = ["bench", "allocator", "--agents", "40", "--frameworks", "4", "--roles", "2"]
    code, out = run_cli(
        [*argv, "--cycles", "1", "--reoffers", "1", "--preemption", "--json"], capsys
    )
    assert code == 0
    p = json.loads(out)["preemption"]
    # Every agent holds one task, and the starved role's need is met by one victim.
    assert p["running_tasks"] == 40 and p["victims"] == 1
    for key in ("snapshot_ms", "plan_ms"):
        assert 0 <= p[key]["min"] <= p[key]["median"] <= p[key]["max"]
    # The full cluster leaves no agent with room; the fragmented one, every agent, and its
    # starved role still needs one victim (no agent's scrap holds its task).
    assert p["agents_with_room"] == 0
    frag = p["fragmented"]
    assert frag["agents_with_room"] == 40 and frag["victims"] == 1
    for key in ("snapshot_ms", "plan_ms"):
        assert 0 <= frag[key]["min"] <= frag[key]["median"] <= frag[key]["max"]
    code, out = run_cli([*argv, "--cycles", "1", "--reoffers", "1", "--preemption"], capsys)
    assert "preemption decision" in out and "cycle with lending" in out
    assert "fragmented snapshot" in out and "room free on all 40 agents" in out
    code, out = run_cli([*argv, "--cycles", "1", "--reoffers", "1"], capsys)
    assert "preemption" not in out


def test_bench_listed_in_the_agora_command():
    from agora.cli.main import COMMAND_MODULES

    assert "agora.cli.bench_cmd" in COMMAND_MODULES


def test_bench_allocator_bad_flags_exit_2(capsys):
    for argv in (
        ["--agents", "0", "--frameworks", "5"],
        ["--agents", "5", "--frameworks", "x"],
        ["--agents", "5", "--frameworks", "5", "--refuse-seconds", "-1"],
        ["--agents", "5", "--frameworks", "5", "--sorter", "fair"],
    ):
        with pytest.raises(SystemExit) as e:
            run_cli(["bench", "allocator", *argv], capsys)
        assert e.value.code == 2
    assert "invalid choice: 'fair'" in capsys.readouterr().err
