"""The dashboard and the agents obey the ACLs, over real HTTPS and mutual TLS with certificates
made by `agora tls`: pages need read_state; a task's sandbox needs read_sandboxes unless the
caller is the principal whose framework runs it (or, at the agent, the master); task
environments are shown to no one else; operators kill others' tasks only with kill_tasks, from
the command line or the dashboard, and drain agents only with drain_agents."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from e2e_framework import Recorder, running
from harness import Daemon, agora, eventually, eventually_async, tls_flags

from agora.common.credentials import Credentials
from agora.common.rpc import open_channel
from agora.frameworks.sdk import TaskSpec
from agora.v1 import agent_pb2, agent_pb2_grpc

pytestmark = pytest.mark.e2e

ACLS = """
register_agents: [{principals: [agent-1]}]
register_frameworks: [{principals: [owner], roles: [ANY]}]
run_tasks: [{principals: [owner], users: [ANY]}]
read_state: [{principals: [owner, ops, viewer]}]
read_sandboxes: [{principals: [ops], frameworks: [acl-e2e]}]
kill_tasks: [{principals: [ops], frameworks: [acl-e2e]}]
set_weights: [{principals: [ANONYMOUS], roles: [ANY]}]
"""


def certs_for(root: Path) -> Path:
    certs = root / "certs"
    assert agora("tls", "init", str(certs)).returncode == 0
    for name, kind in [("master", "master"), ("agent-1", "agent"), ("owner", "framework")] + [
        ("ops", "client"),
        ("viewer", "client"),
        ("eve", "client"),
    ]:
        made = agora("tls", "issue", "--ca", str(certs), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    return certs


def get(url: str, certs: Path, name: str | None) -> tuple[int, dict]:
    """GET `url` as `name` (a client certificate) or anonymously (None): (status, JSON body)."""
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if name is not None:
        context.load_cert_chain(certs / f"{name}.pem", certs / f"{name}-key.pem")
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(url: str, certs: Path, name: str | None, body: dict) -> tuple[int, dict]:
    """POST `body` as JSON to `url` as `name` (or anonymously), as the dashboard's page does."""
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if name is not None:
        context.load_cert_chain(certs / f"{name}.pem", certs / f"{name}-key.pem")
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def cluster(tmp_path):
    certs = certs_for(tmp_path)
    acls = tmp_path / "acls.yaml"
    acls.write_text(ACLS)
    master = Daemon(
        ["master", "--port", "0", "--http-port", "0", "--acls", str(acls)]
        + ["--state-dir", str(tmp_path / "m"), *tls_flags(certs, "master")],
        tmp_path / "master.log",
    ).start()
    agent = Daemon(
        ["agent", "--master", master.address, "--port", "0", "--work-dir", str(tmp_path / "a")]
        + ["--resources", "cpus:2;mem:1024;disk:1024", *tls_flags(certs, "agent-1")]
        + ["--acls", str(acls)],
        tmp_path / "agent.log",
    ).start()
    master.agent = agent
    yield master, certs
    agent.stop()
    master.stop()


def dashboard_url(master: Daemon) -> str:
    line = next(line for line in master.lines if "dashboard" in line and "https://" in line)
    return line[line.index("https://") :].split()[0]


async def test_the_dashboard_obeys_read_state_and_read_sandbox_acls(cluster):
    master, certs = cluster
    await eventually_async(
        lambda: any("dashboard" in line and "https://" in line for line in master.lines),
        timeout=10,
        message="the dashboard's address",
    )
    url = dashboard_url(master).rstrip("/")
    owner = Credentials.load(certs / "ca.pem", certs / "owner.pem", certs / "owner-key.pem")
    framework = Recorder()
    async with running(framework, master.address, name="acl-e2e", credentials=owner):
        spec = TaskSpec(
            name="secretive",
            task_id="t-secret",
            cpus=0.1,
            mem=32,
            command="echo visible-output; sleep 60",
            env={"DB_PASSWORD": "hunter2"},
        )
        await framework.launch(spec)
        await framework.launch(TaskSpec(name="two", task_id="t-two", cpus=0.1, mem=16,
                                        command="sleep 60"))  # fmt: skip
        await framework.wait_state("t-secret", "TASK_RUNNING")
        await framework.wait_state("t-two", "TASK_RUNNING")
        fid = framework.framework_ids[-1]
        stdout = f"{url}/api/tasks/{fid}/t-secret/file?path=stdout"

        def check() -> None:
            # read_state: the principals it names read the pages; others, and anonymous
            # browsers (no client certificate), get 403 naming who and what.
            status, body = get(f"{url}/api/agents", certs, "viewer")
            assert status == 200 and len(body) == 1
            for who in ("eve", None):
                status, body = get(f"{url}/api/agents", certs, who)
                assert status == 403, body
                assert "may not read state" in body["error"]
                assert (who or "anonymous") in body["error"]
            # read_sandboxes: the framework's own principal and ops (by the framework's name)
            # read its output; viewer, who may read state, may not read the sandbox.
            for who in ("owner", "ops"):
                status, body = get(stdout, certs, who)
                assert status == 200, body
                assert "visible-output" in body["data"]
            status, body = get(stdout, certs, "viewer")
            assert status == 403, body
            assert "viewer may not read sandbox" in body["error"]
            assert fid in body["error"]
            status, body = get(f"{url}/api/tasks/{fid}/t-secret/files", certs, "viewer")
            assert status == 403, body
            # The dashboard's actions meet the CLI's ACLs: kill_tasks names ops (for acl-e2e)
            # alone, and no one may drain; a refusal names who may not do what.
            kill = f"{url}/api/tasks/{fid}/t-two/kill"
            for who in ("viewer", None):
                status, body = post(kill, certs, who, {})
                assert status == 403, body
                assert f"{who or 'anonymous'}" in body["error"]
                assert f"may not kill tasks '{fid}'" in body["error"]
            agent_id = get(f"{url}/api/agents", certs, "viewer")[1][0]["agent_id"]
            status, body = post(f"{url}/api/agents/{agent_id}/drain", certs, "ops", {})
            assert status == 403, body
            assert f"ops may not drain agent '{agent_id}'" in body["error"]
            status, body = post(kill, certs, "ops", {})
            assert status == 200, body
            assert "task t-two of acl-e2e" in body["message"]

        await asyncio.to_thread(check)
        await framework.wait_state("t-two", "TASK_KILLED")

        # At the agent itself: the owner reads its sandbox and sees its environment; viewer
        # is refused the file and sees the environment's names only.
        agent_address = f"localhost:{master.agent.port}"
        for who, allowed in (("owner", True), ("viewer", False)):
            creds = Credentials.load(
                certs / "ca.pem", certs / f"{who}.pem", certs / f"{who}-key.pem"
            )
            async with open_channel(agent_address, creds) as channel:
                stub = agent_pb2_grpc.AgentStub(channel)
                read = stub.ReadFile(
                    agent_pb2.ReadFileRequest(framework_id=fid, task_id="t-secret", path="stdout")
                )
                if allowed:
                    assert b"visible-output" in (await read).data
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await read
                    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
                    assert f"viewer may not read sandbox '{fid}'" in e.value.details()
                listed = await stub.ListTasks(agent_pb2.ListAgentTasksRequest())
                [task] = [t.task for t in listed.tasks if t.task.task_id == "t-secret"]
                shown = task.command.environment["DB_PASSWORD"]
                assert shown == ("hunter2" if allowed else "(hidden)")

        # An operator kills the task through the command line: viewer may not, ops may, and
        # the framework hears TASK_KILLED.
        def kill(who: str):
            return agora(
                "cluster", "kill", "acl-e2e", "t-secret", "--master", master.address,
                *tls_flags(certs, who),
            )  # fmt: skip

        refused = await asyncio.to_thread(kill, "viewer")
        assert refused.returncode != 0
        assert "viewer may not kill tasks" in refused.stderr and "Traceback" not in refused.stderr
        done = await asyncio.to_thread(kill, "ops")
        assert done.returncode == 0, done.stderr
        assert "being killed" in done.stdout
        await framework.wait_state("t-secret", "TASK_KILLED")


async def test_only_an_apps_owner_may_scale_it_from_the_dashboard(cluster, tmp_path):
    """The services framework lets an app's owner alone scale it; the dashboard checks the
    caller against that owner first, and says what to run when the framework refuses the
    master's own certificate."""
    master, certs = cluster
    services = Daemon(
        ["services", "--master", master.address, "--state-dir", str(tmp_path / "s")]
        + tls_flags(certs, "owner"),
        tmp_path / "services.log",
    ).start()
    try:
        app = tmp_path / "napper.json"
        app.write_text(json.dumps({"id": "napper", "cmd": "sleep 60", "instances": 1,
                                   "cpus": 0.1, "mem": 16}))  # fmt: skip
        put = await asyncio.to_thread(
            agora, "app", "put", str(app), "--master", master.address, *tls_flags(certs, "owner")
        )
        assert put.returncode == 0, put.stdout + put.stderr
        await eventually_async(
            lambda: any("dashboard" in line and "https://" in line for line in master.lines),
            timeout=10,
            message="the dashboard's address",
        )
        scale = dashboard_url(master).rstrip("/") + "/api/apps/napper/scale"

        def check() -> None:
            status, body = post(scale, certs, "viewer", {"instances": 0})
            assert status == 403, body
            assert "viewer may not scale app napper, which owner owns" in body["error"]
            status, body = post(scale, certs, "owner", {"instances": -1})
            assert status == 400 and "instances must be a whole number" in body["error"]
            # The owner's scale goes through: the master relays it for the owner, and the
            # services framework takes the owner's name from the master's certificate alone.
            status, body = post(scale, certs, "owner", {"instances": 0})
            assert status == 200, body
            assert body["message"] == "app napper: scaling to 0 instance(s)"

        await asyncio.to_thread(check)
        shown = await asyncio.to_thread(
            agora, "app", "get", "napper", "--json", "--master", master.address,
            *tls_flags(certs, "owner"),
        )  # fmt: skip
        # (proto3's JSON leaves a 0 out: 1 before, none now)
        assert json.loads(shown.stdout)["app"].get("instances", 0) == 0
        # Anyone else who claims to act for the owner is not believed: only the master may.
        impostor = await asyncio.to_thread(_scale_claiming_owner, services.address, certs)
        assert impostor == grpc.StatusCode.PERMISSION_DENIED
    finally:
        services.stop()


async def test_only_a_jobs_owner_may_change_it_from_the_dashboard(cluster, tmp_path):
    """A job is held, released, killed or updated by its owner alone: the dashboard refuses
    anyone else itself, and relays the owner's change, which the batch framework takes from the
    master's own certificate only: a caller claiming to act for the owner is refused."""
    master, certs = cluster
    batch = Daemon(
        ["batch", "--master", master.address, "--port", "0", "--state-dir", str(tmp_path / "b")]
        + tls_flags(certs, "owner"),
        tmp_path / "batch.log",
    ).start()
    try:
        as_owner = ("--master", master.address, *tls_flags(certs, "owner"))
        made = await asyncio.to_thread(
            agora, "job", "submit", *as_owner, "--begin", "1h", "--cpus", "0.1", "--mem", "16",
            "--", "true",
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        job_id = made.stdout.strip().splitlines()[-1]
        await eventually_async(
            lambda: any("dashboard" in line and "https://" in line for line in master.lines),
            timeout=10,
            message="the dashboard's address",
        )
        url = dashboard_url(master).rstrip("/")

        def check() -> None:
            for who in ("viewer", None):
                status, body = post(f"{url}/api/jobs/{job_id}/hold", certs, who, {})
                assert status == 403, body
                assert f"may not hold job {job_id}, which owner owns" in body["error"]
            status, body = post(f"{url}/api/jobs/{job_id}/hold", certs, "owner", {})
            assert status == 200, body
            # An owner's weight needs set_weights (which these ACLs give anonymous callers
            # alone).
            weight = {"owner": "owner", "weight": 2}
            status, body = post(f"{url}/api/owners/weight", certs, "ops", weight)
            assert status == 403 and "ops may not set weight" in body["error"], body
            # The master's ACLs let an anonymous caller by, but the master does not relay its
            # action: sent without a name, the batch framework would see the master itself
            # and check the master's rights, not the caller's.
            status, body = post(f"{url}/api/owners/weight", certs, None, weight)
            assert status == 403, body
            assert "an anonymous caller may not act" in body["error"]
            assert "present a client certificate" in body["error"]

        await asyncio.to_thread(check)
        shown = await asyncio.to_thread(agora, "job", "status", job_id, "--json", *as_owner)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["held"]
        owners = await asyncio.to_thread(agora, "job", "owners", "--json", *as_owner)
        assert owners.returncode == 0, owners.stderr
        # The refusal changed nothing: no owner's weight is 2.
        assert all(row.get("weight") != 2 for row in json.loads(owners.stdout)), owners.stdout
        impostor = await asyncio.to_thread(_release_claiming_owner, batch.address, certs, job_id)
        assert impostor == grpc.StatusCode.PERMISSION_DENIED
        shown = await asyncio.to_thread(agora, "job", "status", job_id, "--json", *as_owner)
        assert json.loads(shown.stdout)["held"]
    finally:
        batch.stop()


def _scale_claiming_owner(address: str, certs) -> grpc.StatusCode:
    from agora.v1 import services_pb2, services_pb2_grpc

    return _claiming_owner(
        address,
        certs,
        lambda channel, metadata: services_pb2_grpc.ServicesStub(channel).ScaleApp(
            services_pb2.ScaleAppRequest(id="napper", instances=5), metadata=metadata, timeout=10
        ),
    )


def _release_claiming_owner(address: str, certs, job_id: str) -> grpc.StatusCode:
    from agora.v1 import batch_pb2, batch_pb2_grpc

    return _claiming_owner(
        address,
        certs,
        lambda channel, metadata: batch_pb2_grpc.BatchStub(channel).HoldJob(
            batch_pb2.HoldJobRequest(job_id=job_id, hold=False), metadata=metadata, timeout=10
        ),
    )


def _claiming_owner(address: str, certs, call) -> grpc.StatusCode:
    """`call` made with the viewer's certificate, saying it acts for the owner as only the
    master may: the status it gets."""
    flags = tls_flags(certs, "viewer")
    files = dict(zip(flags[::2], flags[1::2], strict=True))
    read = {k: Path(v).read_bytes() for k, v in files.items()}
    channel = grpc.secure_channel(
        address,
        grpc.ssl_channel_credentials(read["--tls-ca"], read["--tls-key"], read["--tls-cert"]),
    )
    try:
        call(channel, (("agora-on-behalf-of", "owner"),))
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()
    return grpc.StatusCode.OK


def readme_acls() -> str:
    """The ACL file of the README's multi-machine walkthrough, as it is written there."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"cat > acls.yaml <<'EOF'\n(.*?)\nEOF\n", readme, re.S)
    assert found, "the README shows its ACL file"
    return found.group(1)


def test_the_readme_acls_open_neither_the_dashboard_nor_metrics_to_anonymous_callers(tmp_path):
    certs = certs_for(tmp_path)
    made = agora("tls", "issue", "--ca", str(certs), "--name", "prometheus", "--for", "client")
    assert made.returncode == 0, made.stderr
    acls = tmp_path / "acls.yaml"
    acls.write_text(readme_acls())
    master = Daemon(
        ["master", "--port", "0", "--http-port", "0", "--metrics-port", "0"]
        + ["--acls", str(acls), "--state-dir", str(tmp_path / "m"), *tls_flags(certs, "master")],
        tmp_path / "master.log",
    ).start()
    try:
        eventually(
            lambda: any("metrics on" in line for line in master.lines),
            timeout=10,
            message="the metrics address",
        )
        dashboard = dashboard_url(master).rstrip("/") + "/api/overview"
        metrics = next(
            line.split("metrics on ", 1)[1].strip() for line in master.lines if "metrics on" in line
        )
        # read_state: [ANY] lets in every certificate of the CA, not a browser without one.
        assert get(dashboard, certs, "ops")[0] == 200
        status, body = get(dashboard, certs, None)
        assert status == 403 and "anonymous" in json.dumps(body)
        # /metrics is read_metrics': Prometheus' certificate only.
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        for name, expected in ((None, 403), ("ops", 403), ("prometheus", 200)):
            if name is not None:
                context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
                context.load_cert_chain(certs / f"{name}.pem", certs / f"{name}-key.pem")
            try:
                with urllib.request.urlopen(metrics, context=context, timeout=10) as reply:
                    status = reply.status
                    assert b"agora_master" in reply.read()
            except urllib.error.HTTPError as e:
                status = e.code
            assert status == expected, (name, status)
    finally:
        master.stop()
