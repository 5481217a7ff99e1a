"""The service framework with every part a real process: `agora master`, two `agora agent`s,
`agora services`, and the `agora app` client. The daemon prints and publishes its address, and
after a crash (SIGKILL) a new process on the same --state-dir keeps the app and takes back its
running tasks instead of launching new ones."""

from __future__ import annotations

import json
import signal

import pytest
from harness import Cluster, Daemon, agora, eventually
from services_cluster import free_port_range, http_ok

from agora.common.rpc import CHANNEL_OPTIONS
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc

APP = """\
id: web
cmd: exec python3 -m http.server $PORT0 --bind 127.0.0.1
instances: 2
cpus: 0.1
mem: 64
ports: 1
constraints: [[hostname, UNIQUE]]
health_check:
  http: {port_index: 0, path: /}
  grace_period_seconds: 30
  interval_seconds: 0.2
  max_consecutive_failures: 2
"""


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start_master()
    for index in range(2):
        first, last = free_port_range(10)
        c.start_agent(index, resources=f"cpus:2;mem:2048;disk:1024;ports:[{first}-{last}]")
    yield c
    c.stop()


def services(cluster: Cluster, tmp_path, name: str) -> Daemon:
    assert cluster.master and cluster.master.address
    return Daemon(
        [
            "services",
            "--master",
            cluster.master.address,
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "services-state"),
            "--log-level",
            "debug",
        ],
        tmp_path / "logs" / f"{name}.log",
    ).start()


def published(master: str) -> str:
    import grpc

    with grpc.insecure_channel(master, options=CHANNEL_OPTIONS) as channel:
        reply = operator_pb2_grpc.OperatorStub(channel).ListFrameworks(
            operator_pb2.ListFrameworksRequest(), timeout=5
        )
    live = [f for f in reply.frameworks if f.info.name == "services" and f.connected]
    return live[0].info.service_address if live else ""


def running_tasks(master: str) -> list:
    import grpc

    with grpc.insecure_channel(master, options=CHANNEL_OPTIONS) as channel:
        reply = operator_pb2_grpc.OperatorStub(channel).ListTasks(
            operator_pb2.ListTasksRequest(), timeout=5
        )
    return [t for t in reply.tasks if t.state == common_pb2.TASK_RUNNING]


def app_status(master: str) -> dict:
    result = agora("app", "get", "web", "--json", "--master", master)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_processes_end_to_end_with_a_crash_of_the_services_daemon(cluster, tmp_path):
    master = cluster.master.address
    first = services(cluster, tmp_path, "services-1")
    try:
        assert first.lines[0].startswith(f"services listening on {first.address}")
        eventually(
            lambda: published(master) == first.address,
            timeout=30,
            message="address published to the master",
        )
        app_file = tmp_path / "web.yaml"
        app_file.write_text(APP)
        put = agora("app", "put", str(app_file), "--master", master)
        assert put.returncode == 0 and put.stdout.startswith("app web created"), put.stderr

        def two_endpoints():
            result = agora("app", "endpoints", "web", "--master", master)
            lines = result.stdout.split()
            return lines if len(lines) == 2 else None

        for endpoint in eventually(two_endpoints, timeout=60, message="2 endpoints"):
            assert http_ok(endpoint)
        before = {t["task_id"] for t in app_status(master)["tasks"]}
        assert len(before) == 2
    finally:
        first.kill(signal.SIGKILL)
        first.stop()

    second = services(cluster, tmp_path, "services-2")
    try:
        eventually(
            lambda: published(master) == second.address,
            timeout=30,
            message="the new address published",
        )

        def adopted():
            status = app_status(master)
            return status if status.get("healthy") == 2 else None

        status = eventually(adopted, timeout=60, message="tasks adopted and healthy")
        assert {t["task_id"] for t in status["tasks"]} == before  # nothing relaunched

        # Agents keep their tasks on SIGTERM (for recovery): delete the app to end them.
        assert agora("app", "delete", "web", "--master", master).returncode == 0
        eventually(lambda: not running_tasks(master), timeout=30, message="tasks killed")
    finally:
        second.stop()


def test_bad_master_address_is_one_line(tmp_path):
    result = agora("services", "--master", "nonsense", "--state-dir", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.strip().startswith("agora services: cannot start the services daemon")
    assert len(result.stderr.strip().splitlines()) == 1


def test_agora_local_runs_the_services_daemon(tmp_path):
    local = Daemon(
        ["local", "--agents", "1", "--port", "0", "--work-dir", str(tmp_path / "w")],
        tmp_path / "logs" / "local.log",
    ).start()
    try:
        address = eventually(
            lambda: next(
                (
                    line.split()[3]
                    for line in local.lines
                    if line.startswith("services listening on ")
                ),
                None,
            ),
            timeout=30,
            message="the services line",
        )
        eventually(
            lambda: published(local.address) == address,
            timeout=30,
            message="services registered with the local master",
        )
        listed = agora("app", "list", "--json", "--master", local.address)
        assert listed.returncode == 0 and json.loads(listed.stdout) == []
    finally:
        local.stop()


def test_bad_port_is_a_usage_error():
    result = agora("services", "--master", "127.0.0.1:5050", "--port", "70000")
    assert result.returncode == 2 and "--port: port 70000 is not in 0-65535" in result.stderr


def test_a_set_of_two_services_daemons_fails_over_without_relaunching(cluster, tmp_path, zookeeper):
    """`agora services --zk`: the leader killed, the standby takes the app and its running
    tasks over; `agora app` through the master waits out the failover."""
    import uuid

    master = cluster.master.address
    url = f"zk://{zookeeper.address}/services-{uuid.uuid4().hex[:8]}"

    def member(i: int) -> Daemon:
        args = ["services", "--master", master, "--zk", url, "--port", "0"]
        args += ["--state-dir", str(tmp_path / f"services-{i}"), "--log-level", "debug"]
        return Daemon(args, tmp_path / "logs" / f"services-{i}.log").start()

    def leading(d: Daemon) -> bool:
        return any(line.startswith("services leading") for line in d.lines)

    first = member(0)
    second = None
    try:
        eventually(lambda: leading(first), timeout=30, message="the first member leads")
        second = member(1)
        assert second.lines[0].startswith("services standing by")
        app_file = tmp_path / "web.yaml"
        app_file.write_text(APP)
        put = agora("app", "put", str(app_file), "--master", master)
        assert put.returncode == 0, put.stderr

        def healthy():
            status = app_status(master)
            return status if status.get("healthy") == 2 else None

        before = {
            t["task_id"] for t in eventually(healthy, timeout=60, message="2 healthy")["tasks"]
        }
        first.kill(signal.SIGKILL)
        status = app_status(master)  # asked at once: waits for the new leader
        assert leading(second)
        assert {t["task_id"] for t in status["tasks"]} == before  # nothing relaunched
        status = eventually(healthy, timeout=60, message="still 2 healthy")
        assert {t["task_id"] for t in status["tasks"]} == before
        assert agora("app", "delete", "web", "--master", master).returncode == 0
        eventually(lambda: not running_tasks(master), timeout=30, message="tasks killed")
    finally:
        first.stop()
        if second is not None:
            second.stop()
