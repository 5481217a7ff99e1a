"""The README's "Running the daemons on real machines" walk-through, run as written on four
"machines" made of network namespaces: a TLS master with ACLs and the two framework daemons on
one, agents on two others, and a workstation that submits a job, reads its logs and runs an app.

Each ```sh block of the section follows an HTML comment naming its machine
(`<!-- host: master -->`). The test takes the blocks as they are and changes only what a reader
changes: the example addresses 10.0.0.1-4 become the namespaces' own (before anything runs, so
nothing is ever sent to them), /var/lib/agora becomes a directory of that machine's, and each
machine's shell starts in a directory of its own (its "home", where `scp HOST:` puts files).
Three things are done for the reader, as a person at a terminal would: `scp` (no sshd here)
copies the files into the other machine's home; a daemon (`agora master|agent|batch|services`)
is started in the background, and the next line is pasted once it says it is listening; and
`agora app endpoints` is asked again until the health checks pass, as its comment says.
Every other line runs in its machine's namespace through bash and must exit 0.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness import ROOT
from netns import Hosts, netns_unavailable_reason

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

_reason = netns_unavailable_reason()
SECTION = "## Running the daemons on real machines"
# The README's example addresses, by machine: documentation only, never dialled.
PLACEHOLDERS = {"10.0.0.1": "master", "10.0.0.2": "agent-1", "10.0.0.3": "agent-2"}
PLACEHOLDERS["10.0.0.4"] = "client"
DAEMONS = re.compile(r"^agora (master|agent|batch|services)\b")
BLOCK = re.compile(r"<!-- host: ([\w-]+) -->\s*\n```sh\n(.*?)\n```", re.DOTALL)


def readme_blocks() -> list[tuple[str, str]]:
    """(machine, text) of each marked block of the section, in the README's order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) + len(SECTION) :]
    section = section[: section.index("\n## ")]
    return BLOCK.findall(section)


def commands(block: str) -> list[str]:
    """The block's commands: continued lines joined, a here-document kept with its command."""
    lines = block.splitlines()
    result: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<'?(\w+)'?", line)
        if heredoc:
            body = []
            while lines[i] != heredoc.group(1):
                body.append(lines[i])
                i += 1
            i += 1
            line = "\n".join([line, *body, heredoc.group(1)])
        result.append(line)
    return result


def test_the_blocks_name_every_machine_and_only_example_addresses():
    blocks = readme_blocks()
    assert [host for host, _ in blocks] == ["master", "master", "agent-1", "agent-2", "client"]
    text = "\n".join(block for _, block in blocks)
    assert set(re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", text)) == set(PLACEHOLDERS)
    runs = [command for _, block in blocks for command in commands(block)]
    assert any(c.startswith("cat > acls.yaml") for c in runs), "the ACLs are shown"
    # The master, the batch and service daemons, and two agents.
    assert sum(bool(DAEMONS.match(c)) for c in runs) == 5


@dataclass
class Machine:
    name: str
    ns: str
    home: Path
    exports: list[str] = field(default_factory=list)  # the `export` lines pasted so far


@dataclass
class Background:
    command: str
    proc: subprocess.Popen
    log: Path
    lines: list[str] = field(default_factory=list)
    listening: threading.Event = field(default_factory=threading.Event)


def _environment(home: Path) -> dict[str, str]:
    """A reader's shell: `agora` on PATH, no AGORA_* of the test's own, HOME at the machine's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    return env


class Walkthrough:
    """Pastes the blocks machine by machine, keeping what each printed and what runs behind."""

    def __init__(self, hosts: Hosts, root: Path) -> None:
        self.hosts = hosts
        self.root = root
        self.machines = {name: Machine(name, hosts.ns(name), root / name) for name in hosts.names}
        self.by_address = {hosts.address[name]: self.machines[name] for name in hosts.names}
        self.address = {doc: hosts.address[name] for doc, name in PLACEHOLDERS.items()}
        self.background: list[Background] = []
        self.printed: dict[str, str] = {}  # command, as the README writes it -> its stdout
        for machine in self.machines.values():
            machine.home.mkdir()

    def paste(self, name: str, block: str) -> None:
        machine = self.machines[name]
        for written in commands(block):
            command = self.localize(written, machine)
            if command.startswith("scp "):
                self.scp(machine, command)
            elif command.startswith("export "):
                machine.exports.append(command)
            elif DAEMONS.match(command):
                self.start(machine, command)
            else:
                self.run(machine, command, written)

    def localize(self, command: str, machine: Machine) -> str:
        for doc, real in self.address.items():
            command = re.sub(rf"\b{re.escape(doc)}\b", real, command)
        command = command.replace("/var/lib/agora/", f"{machine.home}/var/lib/agora/")
        assert "10.0.0." not in command  # nothing is ever sent to the example addresses
        return command

    def shell(self, machine: Machine, command: str) -> list[str]:
        script = "\n".join([*machine.exports, command])
        return ["ip", "netns", "exec", machine.ns, "bash", "-c", script]

    def scp(self, machine: Machine, command: str) -> None:
        *files, target = shlex.split(command)[1:]
        host, _, where = target.partition(":")
        into = self.by_address[host].home / where
        for name in files:
            shutil.copy(machine.home / name, into)

    def start(self, machine: Machine, command: str) -> None:
        log = self.root / f"{machine.name}-{len(self.background)}.log"
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(
                self.shell(machine, "exec " + command),
                cwd=machine.home,
                env=_environment(machine.home),
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        daemon = Background(command, proc, log)
        self.background.append(daemon)

        def pump() -> None:
            assert proc.stdout
            for raw in proc.stdout:
                daemon.lines.append(raw.decode(errors="replace").rstrip())
                if "listening on" in daemon.lines[-1]:
                    daemon.listening.set()
            daemon.listening.set()

        threading.Thread(target=pump, daemon=True).start()
        daemon.listening.wait(30)
        assert proc.poll() is None and daemon.listening.is_set(), (
            f"on {machine.name}, `{command}` did not start:\n{log.read_text()}"
        )

    def run(self, machine: Machine, command: str, written: str) -> None:
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run(
                self.shell(machine, command),
                cwd=machine.home,
                env=_environment(machine.home),
                capture_output=True,
                text=True,
                timeout=90,
            )
            assert result.returncode == 0, (
                f"on {machine.name}, `{written}` exited {result.returncode}:\n"
                f"{result.stdout}{result.stderr}\n{self.logs()}"
            )
            assert "Traceback" not in result.stderr, result.stderr
            # `agora app endpoints` prints nothing until the health checks pass: ask again.
            if not written.startswith("agora app endpoints") or result.stdout.strip():
                break
            assert time.monotonic() < deadline, f"no endpoint became healthy:\n{self.logs()}"
            time.sleep(0.5)
        self.printed[written] = result.stdout

    def output(self, prefix: str) -> str:
        return next(out for command, out in self.printed.items() if command.startswith(prefix))

    def logs(self) -> str:
        return "\n".join(f"{d.command}:\n{d.log.read_text()[-3000:]}" for d in self.background)

    def stop(self) -> None:
        """Stops the daemons, agents first killing their tasks (SIGUSR1), then anything still
        left in the namespaces (by pid: only what this test started lives there)."""
        for daemon in reversed(self.background):
            if daemon.proc.poll() is None:
                agent = daemon.command.startswith("agora agent")
                daemon.proc.send_signal(signal.SIGUSR1 if agent else signal.SIGTERM)
                try:
                    daemon.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    daemon.proc.kill()
                    daemon.proc.wait(timeout=10)
            if daemon.proc.stdout:
                daemon.proc.stdout.close()
        for name in self.hosts.names:
            pids = subprocess.run(["ip", "netns", "pids", self.hosts.ns(name)], capture_output=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_the_readme_cluster_on_four_machines():
    if not (Path(sys.executable).parent / "agora").exists():
        pytest.skip("the `agora` command is not installed beside this Python (make install)")
    root = Path(tempfile.mkdtemp(prefix="agora-readme-machines-"))
    try:
        with Hosts(["master", "agent-1", "agent-2", "client"]) as hosts:
            walk = Walkthrough(hosts, root)
            try:
                for name, block in readme_blocks():
                    walk.paste(name, block)
                # What the reader sees: the job succeeded, its logs came from the agent that
                # ran it to the workstation, and the app's endpoints answer there.
                submitted = walk.output("agora job submit")
                assert "SUCCEEDED" in submitted, submitted
                logs = walk.output("agora job logs")
                assert re.search(r"^hello from \S+", logs, re.MULTILINE), logs
                endpoints = walk.output("agora app endpoints").split()
                agents = {hosts.address["agent-1"], hosts.address["agent-2"]}
                for endpoint in endpoints:
                    assert endpoint.rsplit(":", 1)[0] in agents, endpoints
                    fetch = f"import urllib.request; urllib.request.urlopen('http://{endpoint}/')"
                    fetched = subprocess.run(
                        [*hosts.exec_prefix("client"), sys.executable, "-c", fetch],
                        capture_output=True,
                        text=True,
                        timeout=30,
                    )
                    assert fetched.returncode == 0, fetched.stderr
                # Nor did any daemon meet an error on the way.
                for daemon in walk.background:
                    log = daemon.log.read_text()
                    assert "Traceback" not in log and "[error" not in log, log[-3000:]
            finally:
                walk.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
