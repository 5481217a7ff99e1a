"""`agora app ...` against a real cluster: the client finds the Services API through the master
(Operator.ListFrameworks), prints tables or JSON, and fails with one line."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import pytest
from harness import ROOT, eventually_async
from services_cluster import ServiceCluster, http_ok


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    await c.start_agent(0)
    await c.start_services()
    yield c
    await c.stop()


async def agora(cluster: ServiceCluster, *argv: str) -> tuple[int, str, str]:
    """`agora app ACTION --master ... REST` as a process of its own: (exit code, out, err)."""
    action, *rest = argv
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agora.cli.main",
        "app",
        action,
        "--master",
        cluster.master.address,
        *rest,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


WEB_YAML = """\
id: web
cmd: exec python3 -m http.server $PORT0 --bind 127.0.0.1
instances: 2
cpus: 0.1
mem: 64
ports: 1
health_check:
  http: {port_index: 0, path: /}
  grace_period_seconds: 30
  interval_seconds: 0.2
  max_consecutive_failures: 2
"""


async def test_put_list_get_endpoints_scale_delete(cluster, tmp_path):
    path = tmp_path / "web.yaml"
    path.write_text(WEB_YAML)
    code, out, err = await agora(cluster, "put", str(path))
    assert (code, err) == (0, "") and out.startswith("app web created (version ")

    async def two_endpoints():
        code, out, _ = await agora(cluster, "endpoints", "web")
        lines = out.split()
        return lines if code == 0 and len(lines) == 2 else None

    endpoints = await eventually_async(two_endpoints, timeout=60, message="2 endpoints")
    for endpoint in endpoints:
        assert await asyncio.to_thread(http_ok, endpoint)

    code, out, _ = await agora(cluster, "list")
    header, row = out.splitlines()
    assert header.split() == ["ID", "INSTANCES", "HEALTHY", "STATE", "WAITING"]
    assert row.split()[:4] == ["web", "2", "2", "RUNNING"]

    code, out, _ = await agora(cluster, "get", "web")
    assert code == 0 and "state:      RUNNING" in out and "2 healthy" in out
    assert out.count("healthy  ") + out.count("healthy ") >= 2

    code, out, _ = await agora(cluster, "get", "web", "--json")
    data = json.loads(out)
    assert data["app"]["id"] == "web" and data["healthy"] == 2 and len(data["tasks"]) == 2

    code, out, _ = await agora(cluster, "scale", "web", "1")
    assert (code, out.strip()) == (0, "app web scaled to 1 instance(s)")
    await eventually_async(lambda: _count(cluster, "web", 1), timeout=30, message="scaled")

    code, out, _ = await agora(cluster, "delete", "web")
    assert code == 0 and "deleted" in out
    code, out, err = await agora(cluster, "get", "web")
    assert (
        code == 1
        and out == ""
        and err.strip() == "agora app: no app 'web'; `agora app list` shows the apps"
    )


async def _count(cluster, app_id, n):
    return len((await cluster.get(app_id)).tasks) == n


async def test_get_says_why_instances_wait(cluster, tmp_path):
    path = tmp_path / "uniq.json"
    path.write_text(
        json.dumps(
            {
                "id": "uniq",
                "cmd": "sleep 1000",
                "instances": 2,
                "cpus": 0.1,
                "mem": 32,
                "constraints": [["hostname", "UNIQUE"]],
            }
        )
    )
    assert (await agora(cluster, "put", str(path)))[0] == 0

    async def waiting():
        code, out, _ = await agora(cluster, "get", "uniq")
        return out if "waiting:" in out else None

    out = await eventually_async(waiting, timeout=30, message="a waiting reason")
    assert "1 instance(s) cannot be placed" in out and "[hostname, UNIQUE]" in out
    assert "host-0" in out


@pytest.mark.parametrize(
    "name,text,words",
    [
        ("bad.json", '{"id": "web", "cmd": "x", "instances": }', ["bad.json", "line 1"]),
        ("bad.yaml", "id: web\ncmd: [unclosed\n", ["bad.yaml", "not valid YAML", "line"]),
        ("typo.yaml", "id: web\ncommand: x\n", ["typo.yaml", "command"]),
        (
            "neg.yaml",
            "id: web\ncmd: x\ninstances: 1\ncpus: -1\nmem: 1\n",
            ["cpus must be more than"],
        ),
        ("short.yaml", "id: web\ncmd: x\ncpus: 1\nmem: 1\n", ["missing 'instances'"]),
        (
            "op.yaml",
            "id: web\ncmd: x\ninstances: 1\ncpus: 1\nmem: 1\nconstraints: [[hostname, NEAR, x]]\n",
            ["unknown operator 'NEAR'"],
        ),
    ],
)
async def test_bad_app_files_fail_with_one_line(cluster, tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    code, out, err = await agora(cluster, "put", str(path))
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("agora app: ")
    for word in words:
        assert word in err
    code, out, _ = await agora(cluster, "list", "--json")
    assert json.loads(out) == []


async def test_create_only_refuses_a_duplicate(cluster, tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("id: dup\ncmd: sleep 100\ncpus: 0.1\nmem: 16\ninstances: 0\n")
    assert (await agora(cluster, "put", str(path), "--create"))[0] == 0
    code, _, err = await agora(cluster, "put", str(path), "--create")
    assert code == 1 and "app dup already exists" in err


async def test_no_services_framework_is_a_clear_error(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    try:
        code, _, err = await agora(c, "list")
        assert code == 1 and "no 'services' framework is registered" in err
    finally:
        await c.stop()


async def test_endpoints_watch_prints_each_change_until_the_app_is_deleted(cluster, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(
        WEB_YAML.replace("instances: 2", "instances: 1").replace("id: web", "id: watched")
    )
    assert (await agora(cluster, "put", str(path)))[0] == 0
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agora.cli.main",
        "app",
        "endpoints",
        "watched",
        "--watch",
        "--json",
        "--master",
        cluster.master.address,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        seen: list[int] = []
        while not seen or seen[-1] < 1:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            seen.append(len(json.loads(line).get("endpoints", [])))
        assert (await agora(cluster, "scale", "watched", "2"))[0] == 0
        while seen[-1] < 2:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            seen.append(len(json.loads(line).get("endpoints", [])))
        assert (await agora(cluster, "delete", "watched"))[0] == 0
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0 and "watched was deleted" in err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()


async def test_the_plain_grpc_example_runs_an_app_until_it_is_healthy(cluster):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "run_app_grpc.py"),
        "--master",
        cluster.master.address,
        "--instances",
        "2",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    lines = out.decode().splitlines()
    assert proc.returncode == 0, err.decode()
    assert lines[0].startswith("app hello-web created, version ")
    assert lines[-1].startswith("2/2 healthy: ")
    for endpoint in lines[-1].split(": ", 1)[1].split():
        assert await asyncio.to_thread(http_ok, endpoint)
