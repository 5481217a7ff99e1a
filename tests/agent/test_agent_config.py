"""AgentConfig: each field declared once (flag, default, help, bounds), each bad value refused
by name; durations are named in seconds as in MasterConfig, the flags keep their names."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from harness import agora

from agora.agent.config import AgentConfig
from agora.cli.main import build_parser
from agora.common.settings import flag_settings

# The flags the README and the tests use: their names and defaults are the contract.
FLAGS = {
    "--master": None,
    "--host": None,
    "--port": 5051,
    "--resources": None,
    "--attributes": {},
    "--work-dir": None,
    "--advertise-ip": None,
    "--hostname": None,
    "--isolation": "cgroups",
    "--cpu-hard-limit": False,
    "--metrics-port": None,
    "--max-log-mb": 10,
    "--no-disk-limit": False,
    "--gc-delay": 7 * 24 * 3600.0,
    "--gc-disk-headroom": 0.1,
    "--max-completed-tasks": 1000,
    "--task-pids-max": 1024,
    "--task-namespaces": None,
    "--gpus": None,
    "--container-runtime": None,
    "--task-env": [],
    "--acls": None,
}


def agent_parser():
    parser = build_parser(["agent"])
    return parser, parser._subparsers._group_actions[0].choices["agent"]  # type: ignore[union-attr]


def test_every_flag_keeps_its_name_default_and_help():
    _, agent = agent_parser()
    actions = {a.option_strings[0]: a for a in agent._actions if a.option_strings}
    for flag, default in FLAGS.items():
        assert actions[flag].default == default, flag
        assert actions[flag].help, flag
    assert "(default 10)" in agent.format_help()  # --max-log-mb, from 10 MB in bytes


def test_the_command_lines_defaults_are_the_configs_but_where_it_decides_later():
    parser, _ = agent_parser()
    args = parser.parse_args(["agent", "--master", "127.0.0.1:5050"])
    settings = flag_settings(args, AgentConfig)
    # The command line finds its address towards the master and names its work dir by port.
    assert settings.pop("host") is None and settings.pop("work_dir") is None
    library = AgentConfig(master="m")
    assert AgentConfig(master="m", **settings) == library


def test_flags_map_to_fields():
    parser, _ = agent_parser()
    argv = ["agent", "--master", "m:1", "--isolation", "none", "--no-disk-limit"]
    argv += ["--max-log-mb", "0.5", "--gc-delay", "2h", "--task-env", "TZ", "--work-dir", "w"]
    config = AgentConfig(master="m:1", **flag_settings(parser.parse_args(argv), AgentConfig))
    assert (config.cgroups, config.enforce_disk) == (False, False)
    assert config.max_log_bytes == 512 * 1024
    assert config.gc_delay_seconds == 7200.0
    assert config.task_env == ("TZ",) and config.work_dir == Path("w")


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("heartbeat_interval_seconds", float("nan"), "must be a positive number of seconds"),
        ("reconnect_backoff_initial_seconds", -3, "must be a positive number of seconds"),
        ("update_backoff_initial_seconds", "5", "must be a positive number of seconds, got '5'"),
        ("default_kill_grace_seconds", -1, "must be 0 or more seconds, got -1"),
        ("sandbox_watch_interval_seconds", 0, "must be a positive number of seconds, got 0"),
        ("max_log_bytes", 0, "must be at least 1, got 0"),
        ("task_pids_max", -7, "must be at least 0, got -7"),
        ("gc_disk_headroom", float("nan"), "must be a fraction between 0 and 1, got nan"),
    ],
)
def test_agent_config_refuses_each_bad_value_by_name(tmp_path, field, value, says):
    config = AgentConfig(master="127.0.0.1:1", work_dir=tmp_path, **{field: value})
    with pytest.raises(ValueError, match=f"^{re.escape(field)} {re.escape(says)}"):
        config.validate()


def test_every_duration_is_named_in_seconds_and_every_number_is_bounded():
    for f in dataclasses.fields(AgentConfig):
        if f.type in ("int", "float", "int | None", "float | None"):
            assert f.metadata.get("number") is not None, f.name
            if f.metadata["number"].unit == "seconds":
                assert f.name.endswith("_seconds"), f.name


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--max-completed-tasks", "0", "must be at least 1, got 0"),
        ("--gc-delay", "-5", "must be 0 or more seconds, got -5.0"),
        ("--gc-disk-headroom", "nan", "must be a fraction between 0 and 1, got nan"),
        ("--max-log-mb", "0", "'0' is not a positive number of MB"),
    ],
)
def test_agora_agent_refuses_a_bad_value_in_one_line_naming_the_flag(flag, value, says):
    out = agora("agent", "--master", "127.0.0.1:1", flag, value)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and f"argument {flag}: {says}" in out.stderr
