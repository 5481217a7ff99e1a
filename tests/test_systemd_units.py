"""The systemd units in docs/systemd: each daemon's command line is one the `agora` command
accepts today (a renamed flag would break every installed machine), and systemd itself finds
nothing wrong with them (`systemd-analyze verify`, where this machine has it)."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agora.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
UNITS = sorted((ROOT / "docs" / "systemd").glob("*.service"))
ENV_FILE = ROOT / "docs" / "systemd" / "agora.env"


def environment() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_FILE.read_text().splitlines())
    return {k: v for k, v in (p for p in pairs if len(p) == 2) if not k.startswith("#")}


def service(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(path.read_text())
    return parser["Service"]


def test_there_is_a_unit_for_each_daemon():
    assert [u.name for u in UNITS] == [
        "agora-agent.service",
        "agora-batch.service",
        "agora-master.service",
        "agora-services.service",
    ]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.stem)
def test_the_command_line_of_each_unit_parses(unit):
    section = service(unit)
    assert section["EnvironmentFile"] == "/etc/agora/agora.env"
    env = environment()
    command = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], section["ExecStart"])
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "/opt/agora/.venv/bin/agora"
    args = build_parser(words[1:]).parse_args(words[1:])  # exits 2 on a flag it does not know
    assert args.command == unit.stem.removeprefix("agora-")
    state = section["StateDirectory"]
    assert f"/var/lib/{state}" in words  # the work or state dir is the one systemd makes


def test_the_agent_unit_leaves_tasks_running_and_gets_its_cgroups():
    section = service(ROOT / "docs" / "systemd" / "agora-agent.service")
    assert section["KillMode"] == "process"
    assert section["Delegate"] == "yes"


def test_systemd_finds_nothing_wrong(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not on this machine (the parse test above still runs)")
    env = tmp_path / "agora.env"
    shutil.copy(ENV_FILE, env)
    agora = Path(sys.executable).with_name("agora")
    for unit in UNITS:
        text = unit.read_text().replace("/opt/agora/.venv/bin/agora", str(agora))
        (tmp_path / unit.name).write_text(text.replace("/etc/agora/agora.env", str(env)))
    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / u.name) for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
