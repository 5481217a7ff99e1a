"""`agora services` as a real process: it prints its address, publishes it to the master, and
after a crash (SIGKILL) a new process on the same --state-dir keeps the apps and takes back
their running tasks instead of launching new ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from agora.v1 import operator_pb2, operator_pb2_grpc, services_pb2, services_pb2_grpc
from harness import ROOT, eventually_async
from services_cluster import ServiceCluster, web_app

from common.rpc import insecure_channel

# `agora services ...` exactly as the agora command runs it (cli.services_cmd's parser and
# func), without importing the other commands.
_RUNNER = """
import argparse, sys
import cli.services_cmd
from cli.main import CommandError
parser = argparse.ArgumentParser(prog="agora")
cli.services_cmd.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(sys.argv[1:])
try:
    sys.exit(int(args.func(args) or 0))
except CommandError as e:
    print(f"agora {args.command}: {e}", file=sys.stderr)
    sys.exit(1)
"""


class ServicesProcess:
    def __init__(self, master: str, state_dir, log_path) -> None:
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RUNNER, "services", "--master", master, "--port", "0",
             "--state-dir", str(state_dir), "--log-level", "debug"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.first_line = ""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout
            self.first_line = self.proc.stdout.readline().decode().strip()
            ready.set()
            for _ in self.proc.stdout:
                pass
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        ready.wait(60)

    @property
    def address(self) -> str:
        return self.first_line.split()[3]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self.reader.join(timeout=10)  # EOF once the process (and its pipe) is gone
        assert self.proc.stdout
        self.proc.stdout.close()
        self.log.close()
        return code


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    await c.start_agent(0)
    await c.start_agent(1)
    yield c
    await c.stop()


async def published_address(master: str) -> str:
    async with insecure_channel(master) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        reply = await stub.ListFrameworks(operator_pb2.ListFrameworksRequest())
    live = [f for f in reply.frameworks if f.info.name == "services" and f.connected]
    return live[0].info.service_address if live else ""


async def tasks_of(address: str, app_id: str) -> services_pb2.AppStatus:
    async with insecure_channel(address) as channel:
        stub = services_pb2_grpc.ServicesStub(channel)
        return await stub.GetApp(services_pb2.GetAppRequest(id=app_id))


async def test_crash_and_restart_keeps_apps_and_adopts_tasks(cluster, tmp_path):
    state = tmp_path / "services-state"
    first = ServicesProcess(cluster.master.address, state, tmp_path / "services-1.log")
    try:
        assert first.first_line.startswith("services listening on 127.0.0.1:")
        address = first.address
        assert await eventually_async(lambda: _is(published_address, cluster, address),
                                      timeout=30, message="address published to the master")
        async with insecure_channel(address) as channel:
            stub = services_pb2_grpc.ServicesStub(channel)
            await stub.PutApp(services_pb2.PutAppRequest(app=web_app("svc", 2)))

        async def healthy():
            status = await tasks_of(address, "svc")
            return status if status.healthy == 2 else None
        before = await eventually_async(healthy, timeout=60, message="2 healthy instances")
    finally:
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL

    second = ServicesProcess(cluster.master.address, state, tmp_path / "services-2.log")
    try:
        address = second.address
        status = await tasks_of(address, "svc")
        assert {t.task_id for t in status.tasks} == {t.task_id for t in before.tasks}

        async def adopted():
            status = await tasks_of(address, "svc")
            return status if status.healthy == 2 else None
        after = await eventually_async(adopted, timeout=60, message="tasks adopted")
        assert {t.task_id for t in after.tasks} == {t.task_id for t in before.tasks}
        assert await eventually_async(lambda: _is(published_address, cluster, address),
                                      timeout=30, message="new address published")
    finally:
        assert second.stop() == 0


async def _is(fn, cluster, expected):
    return await fn(cluster.master.address) == expected


async def test_bad_master_address_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, "services", "--master", "nonsense",
         "--state-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("agora services: cannot start the services daemon")
    assert len(proc.stderr.strip().splitlines()) == 1


