"""The `agora` command imports only what the chosen command uses.

`agora --help` names every command from the table in agora.cli.main without importing any
command module, and `agora job submit ...` imports agora.cli.job_cmd alone; so a client command
never pays for the master, the agent, the experiments or a framework daemon. A client command
that runs loads its client side only: no framework daemon or store, no TLS library when it has
no certificates, no tokens-file parser, server-side gRPC service or logging library. Each case
runs the command in a fresh interpreter and reads its sys.modules afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agora.cli.main import COMMANDS, build_parser, main

# Run `agora ARGS` as the console script does (agora.cli.main.main), then report the exit
# status and every module loaded, as JSON on the last line of stderr.
PROBE = """
import json, sys
from agora.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

# Whole subsystems no client command needs: the daemons, the experiments and their plots.
DAEMONS_AND_EXPERIMENTS = (
    "agora.master",
    "agora.agent",
    "agora.experiments",
    "aiohttp",
    "matplotlib",
)
# What a help page never needs: it talks to nothing.
NETWORK_AND_WIRE = ("grpc", "google.protobuf", "cryptography", "structlog", "asyncio")
# What a client that calls a daemon never needs: the framework daemons, their schedulers and
# stores (SQLite), the SDK's driver; TLS certificates (cryptography) when it has none to read;
# a tokens file's parser (yaml); the health and reflection services a server offers; structlog
# (a client command logs nothing). `import grpc` itself loads the empty packages grpc_health
# and grpc_reflection, not their servers.
NOT_FOR_A_CLIENT = (
    "agora.frameworks.batch.daemon",
    "agora.frameworks.batch.scheduler",
    "agora.frameworks.batch.service",
    "agora.frameworks.batch.store",
    "agora.frameworks.sdk.daemon",
    "agora.frameworks.sdk.driver",
    "agora.frameworks.service.daemon",
    "agora.frameworks.service.scheduler",
    "agora.frameworks.service.servicer",
    "agora.frameworks.service.store",
    "agora.common.standard_services",
    "sqlite3",
    "cryptography",
    "yaml",
    "grpc_health.v1",
    "grpc_reflection.v1alpha",
    "structlog",
)


def run_agora(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return result, report


def loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--help"], "COMMAND"),
        (["job", "submit", "--help"], "--instances"),
        (["job", "--help"], "submit"),
        (["cluster", "agents", "--help"], "--json"),
        (["app", "put", "--help"], "usage: agora app put"),
        (["task", "logs", "--help"], "usage: agora task logs"),
    ],
)
def test_help_loads_no_daemon_and_no_grpc(args, expected):
    result, report = run_agora(*args)
    assert report["exit"] == 0, result.stderr
    assert expected in result.stdout  # the full help of the command asked for
    modules = report["modules"]
    assert loaded(modules, DAEMONS_AND_EXPERIMENTS) == []
    assert loaded(modules, ("agora.frameworks",)) == []  # not even a framework's client
    assert loaded(modules, NETWORK_AND_WIRE) == []
    # Of the command modules, only the one named is imported (none for `agora --help`).
    commands = sorted(m for m in modules if m.startswith("agora.cli.") and m.endswith("_cmd"))
    chosen = [COMMANDS[args[0]][0]] if args[0] in COMMANDS else []
    assert commands == chosen


@pytest.mark.parametrize(
    "args, client",
    [
        (["cluster", "agents", "--master", "127.0.0.1:1", "--json"], None),
        (["job", "submit", "--master", "127.0.0.1:1", "--", "true"], "agora.frameworks.batch"),
        (["app", "list", "--master", "127.0.0.1:1"], "agora.frameworks.service"),
    ],
)
def test_a_client_command_that_runs_loads_no_daemon(args, client):
    # Port 1 refuses at once: the command reaches its gRPC call and fails there.
    result, report = run_agora(*args)
    assert report["exit"] == 1
    assert "cannot reach the master at 127.0.0.1:1" in result.stderr
    modules = report["modules"]
    assert "grpc" in modules  # it did get as far as dialling
    assert loaded(modules, DAEMONS_AND_EXPERIMENTS) == []
    assert loaded(modules, NOT_FOR_A_CLIENT) == []
    if client is None:
        assert loaded(modules, ("agora.frameworks",)) == []
    else:  # it found the framework's API through its client module
        assert client + ".client" in modules


def test_top_level_help_is_the_same_whichever_command_is_loaded():
    # The table's summaries are what each module registers: `agora --help` (no module loaded)
    # reads exactly as it does with any one command's module registered in full.
    unloaded = build_parser([]).format_help()
    assert all(name in unloaded for name in COMMANDS)
    for name in COMMANDS:
        assert build_parser([name]).format_help() == unloaded, name


def test_each_module_registers_the_command_the_table_names():
    for name, (module, _) in COMMANDS.items():
        parser = build_parser([name])
        (subparsers,) = [a for a in parser._actions if a.dest == "command"]
        # A registered command has its own flags beyond --help; a stub from the table has none.
        assert len(subparsers.choices[name]._actions) > 1, module


def test_unknown_command_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["nosuch"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err
    assert all(repr(name) in err for name in COMMANDS)


def test_only_the_chosen_job_action_is_built_in_full():
    """`agora job submit` builds the submit parser in full and its siblings by name only
    (cli/lazy_actions.py): every action still parses, and `agora job --help` lists them all."""
    from agora.cli.main import build_parser

    args = build_parser(["job", "hold", "job-1"]).parse_args(["job", "hold", "job-1"])
    assert (args.job_command, args.job_id, args.action) == ("hold", "job-1", "hold")
    argv = ["job", "schedule", "nightly", "--cron", "@daily", "--", "true"]
    args = build_parser(argv).parse_args(argv)
    # NAME and the flags after it are read by the action itself (job_schedules._name_first),
    # with the parser it was built with, in full.
    assert args.argv == ["nightly", "--cron", "@daily", "--", "true"]
    assert any("--cron" in a.option_strings for a in args.parser._actions)
    listed = run_agora("job", "--help")[0].stdout
    for action in ("submit", "hold", "requeue", "schedule", "unschedule", "history", "owners"):
        assert action in listed


def test_bench_help_loads_the_allocator_it_names_but_not_the_lab():
    result, report = run_agora("bench", "allocator", "--help")
    assert report["exit"] == 0, result.stderr
    assert "--frameworks" in result.stdout
    assert loaded(report["modules"], ("agora.experiments", "matplotlib")) == []


def test_bench_help_names_the_agents_the_bench_builds():
    from agora.cli import bench_cmd
    from agora.experiments import bench

    assert bench_cmd.AGENT_RESOURCES == bench.AGENT_RESOURCES
