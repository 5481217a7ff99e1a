"""The launch spec and the wrapper's report lines: pure, without a process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agora.agent.launch_spec import LaunchSpec, WrapperUser
from agora.agent.wrapper_reports import (
    MAX_REPORT,
    Handed,
    Refused,
    Started,
    format_report,
    parse_line,
    parse_report,
)


def spec(**changes) -> LaunchSpec:
    base = LaunchSpec.in_sandbox(
        ["/bin/sh", "-c", "echo hi"],
        {"PATH": "/usr/bin", "AGORA_TASK_ID": "t1"},
        Path("/work/sandboxes/fw/t1"),
        ["/sys/fs/cgroup/agora/run-1"],
        WrapperUser(1000, 1000, (1000, 27)),
    )
    return base._replace(**changes)


def test_a_spec_in_a_sandbox_sends_the_tasks_output_there():
    s = spec()
    assert s.cwd == "/work/sandboxes/fw/t1"
    assert (s.stdout, s.stderr) == (
        "/work/sandboxes/fw/t1/stdout",
        "/work/sandboxes/fw/t1/stderr",
    )
    assert s.argv == ("/bin/sh", "-c", "echo hi")


def test_a_spec_is_frozen():
    with pytest.raises(AttributeError):
        spec().argv = ("true",)  # type: ignore[misc]


@pytest.mark.parametrize("user", [None, WrapperUser(1000, 1000, (1000, 27))])
def test_a_spec_survives_its_wire_form(user):
    original = spec(user=user)
    # Through JSON, as the launcher's pipe and spec.json carry it.
    assert LaunchSpec.from_wire(json.loads(json.dumps(original.to_wire()))) == original


def test_the_wire_form_is_what_the_wrappers_read():
    """The keys the Python wrapper and older spec.json files use (agent/README.md)."""
    assert spec(cgroups=(), user=None).to_wire() == {
        "argv": ["/bin/sh", "-c", "echo hi"],
        "env": {"PATH": "/usr/bin", "AGORA_TASK_ID": "t1"},
        "cwd": "/work/sandboxes/fw/t1",
        "stdout": "/work/sandboxes/fw/t1/stdout",
        "stderr": "/work/sandboxes/fw/t1/stderr",
        "cgroups": [],
        "user": None,
    }
    in_namespaces = spec(cgroups=(), user=None)._replace(namespaces="67108864:/work/sandboxes")
    assert LaunchSpec.from_wire(in_namespaces.to_wire()) == in_namespaces


@pytest.mark.parametrize(
    "wire",
    [None, [], {}, {"argv": ["true"]}, {**spec().to_wire(), "env": ["A=1"]}],
    ids=["null", "list", "empty", "argv-only", "env-not-an-object"],
)
def test_anything_else_on_the_wire_is_refused_by_name(wire):
    with pytest.raises(ValueError, match="not a launch spec"):
        LaunchSpec.from_wire(wire)


# --- report lines -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "report",
    [
        Started(4242, 4241, 1764190000.123456, 987654),
        Refused("cannot run '/no/such': command not found"),
        Handed(4241, 987650),
        Handed(4241, None),
    ],
    ids=["started", "refused", "handed", "handed-after-its-end"],
)
def test_every_report_reads_back_as_itself(report):
    line = format_report(report, "run-abc")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_line(line) == ("run-abc", report)
    # A one-shot wrapper's stdout carries the report alone.
    assert parse_report(format_report(report).decode()) == report


def test_the_c_wrappers_started_line_parses():
    """agent/task_wrapper.c writes the start with printf's %.6f."""
    line = b"run-1 started 300 299 1764190000.500000 12345\n"
    assert parse_line(line) == ("run-1", Started(300, 299, 1764190000.5, 12345))


def test_a_message_stays_on_one_line_and_fits_one_atomic_write():
    line = format_report(Refused("first\nsecond" + "x" * 10_000), "run-1")
    assert len(line) <= MAX_REPORT and line.count(b"\n") == 1
    run_id, report = parse_line(line)
    assert run_id == "run-1"
    assert isinstance(report, Refused) and report.message.startswith("first second")


@pytest.mark.parametrize(
    "text",
    ["", "stared 1 2 3 4", "started 1 2 3", "started a b c d", "handed x 1", "handed 1"],
)
def test_what_is_not_a_report_parses_to_none(text):
    assert parse_report(text) is None
    assert parse_line(f"run-1 {text}".encode()) == ("run-1", None)
