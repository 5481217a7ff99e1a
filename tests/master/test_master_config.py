"""MasterConfig and AllocatorConfig: each field declared once, each bad value refused by name."""

from __future__ import annotations

import dataclasses
import re

import pytest

from agora.cli.main import build_parser
from agora.common.settings import flag_settings
from agora.master import MasterConfig
from agora.master.allocator import AllocatorConfig

# The flags the README, the docs and the tests use: their names and defaults are the contract.
FLAGS = {
    "--host": "127.0.0.1",
    "--port": 5050,
    "--state-dir": None,
    "--heartbeat-interval": 5.0,
    "--agent-timeout": 30.0,
    "--agent-removal-rate-limit": None,
    "--allocation-batch": 0.002,
    "--allocation-interval": 1.0,
    "--allocation-mode": "event",
    "--offer-mode": "pessimistic",
    "--optimistic-fanout": 3,
    "--optimistic-grace": 0.5,
    "--max-hold": 300.0,
    "--offer-timeout": 60.0,
    "--max-kill-grace": 300.0,
    "--max-send-queue": 50_000,
    "--max-completed-tasks-per-framework": 1000,
    "--max-removed-frameworks": 1000,
    "--max-removed-agents": 10_000,
    "--role-sorter": "drf",
    "--framework-sorter": "drf",
    "--default-refuse-seconds": 5.0,
    "--min-task-cpus": 0.001,
    "--min-task-mem": 4.0,
    "--guarantee-preemption-timeout": None,
    "--fair-share-preemption-timeout": None,
    "--max-preemptions-per-minute": 10,
    "--preemption-timeout": [],
    "--http-port": None,
    "--metrics-port": None,
    "--join-ca": None,
    "--join-port": 5052,
    "--join-cert-days": 30.0,
    "--acls": None,
    "--max-request-mb": 64,
    "--max-calls-per-principal": 64,
    "--max-streams-per-principal": 256,
    "--audit-log": None,
    "--zk": None,
    "--zk-session-timeout": None,
    "--advertise-ip": None,
}


def master_parser():
    parser = build_parser(["master"])
    return parser, parser._subparsers._group_actions[0].choices["master"]  # type: ignore[union-attr]


def test_every_flag_keeps_its_name_default_and_help():
    _, master = master_parser()
    actions = {a.option_strings[0]: a for a in master._actions if a.option_strings}
    for flag, default in FLAGS.items():
        assert actions[flag].default == default, flag
        assert actions[flag].help, flag
    text = master.format_help()
    assert "(default 0.002)" in text and "(default 50000)" in text and "(default 10000)" in text


def test_the_command_lines_defaults_are_the_configs():
    parser, _ = master_parser()
    args = parser.parse_args(["master"])
    assert MasterConfig(**flag_settings(args, MasterConfig)) == MasterConfig()


def test_flags_map_to_fields_with_their_units():
    parser, _ = master_parser()
    args = parser.parse_args(
        ["master", "--agent-timeout", "1m", "--offer-timeout", "0", "--max-request-mb", "8"]
        + ["--preemption-timeout", "a=30", "--preemption-timeout", "b=1h", "--state-dir", "s"]
    )
    config = MasterConfig(**flag_settings(args, MasterConfig))
    assert config.agent_timeout_seconds == 60.0
    assert config.offer_timeout_seconds is None  # 0: never, as Mesos writes it
    assert config.max_request_bytes == 8 * 1024 * 1024
    assert config.role_preemption_timeouts == {"a": 30.0, "b": 3600.0}
    assert str(config.state_dir) == "s"


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("allocation_batch_seconds", float("nan"), "must be 0 or more seconds, got nan"),
        ("agent_timeout_seconds", -3, "must be a positive number of seconds, got -3"),
        ("heartbeat_interval_seconds", "5", "must be a positive number of seconds, got '5'"),
        ("optimistic_fanout", -7, "must be at least 1, got -7"),
        ("optimistic_fanout", 2.5, "must be a whole number, at least 1, got 2.5"),
        ("max_send_queue", 0, "must be at least 1, got 0"),
        ("max_calls_per_principal", -1, "must be at least 0, got -1"),
        ("min_task_cpus", 0.0001, "must be at least 0.001, got 0.0001"),
        ("min_task_mem", 0, "must be a positive number of MB, got 0"),
        ("join_cert_days", float("inf"), "must be a positive number of days, got inf"),
        ("offer_timeout_seconds", 0, "must be a positive number of seconds (or None), got 0"),
        ("http_port", 65536, "must be a whole number between 0 and 65535 (or None)"),
        ("default_hold_seconds", 400.0, "must not exceed max_hold_seconds"),
    ],
)
def test_master_config_refuses_each_bad_value_by_name(field, value, says):
    with pytest.raises(ValueError, match=f"^{re.escape(field)}.*{re.escape(says)}"):
        MasterConfig(**{field: value}).validate()


@pytest.mark.parametrize(
    "values, says",
    [
        ({"default_refuse_seconds": float("nan")}, "default_refuse_seconds must be a number"),
        ({"default_refuse_seconds": -3}, "default_refuse_seconds must be a number between 0"),
        ({"default_refuse_seconds": "5"}, "default_refuse_seconds must be a number between 0"),
        ({"optimistic_fanout": -7}, "optimistic_fanout must be at least 0, got -7"),
        ({"optimistic_fanout": True}, "optimistic_fanout must be a whole number, at least 0"),
        ({"seed": 1.5}, "seed must be a whole number (or None), got 1.5"),
    ],
)
def test_allocator_config_refuses_each_bad_value_by_name(values, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        AllocatorConfig(**values)


def test_every_number_of_the_configs_is_declared_with_its_bounds():
    # One validation style: a numeric field without its Number would go unchecked.
    for config in (MasterConfig, AllocatorConfig):
        for f in dataclasses.fields(config):
            if f.type in ("int", "float", "int | None", "float | None"):
                assert f.metadata.get("number") is not None, f"{config.__name__}.{f.name}"
