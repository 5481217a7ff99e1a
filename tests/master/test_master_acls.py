"""ACLs through the real master over mutual TLS: for each rule an allowed and a denied call,
refusals naming the principal, the action and the object, framework and agent ids bound to the
principal that registered them, the file re-read on SIGHUP, and a bad file refused at start."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from agora.common.credentials import Credentials
from agora.common.rpc import open_channel
from agora.master import Master, MasterConfig
from agora.v1 import (
    agent_link_pb2,
    agent_link_pb2_grpc,
    common_pb2,
    operator_pb2,
    operator_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

ACLS = """
register_agents: [{principals: [agent-1]}]
register_frameworks: [{principals: [batch], roles: ["*"]}, {principals: [mallory], roles: [dev]}]
run_tasks: [{principals: [batch], users: [nobody]}]
set_weights: [{principals: [ops], roles: [ANY]}]
set_quota: [{principals: [ops], roles: [analytics]}]
drain_agents: [{principals: [ops], agents: [ANY]}]
read_state: [{principals: [ops, batch]}]
kill_tasks: [{principals: [ops], frameworks: [batch]}]
teardown_frameworks: [{principals: [ops], frameworks: [ANY]}]
"""


def agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("certs")
    assert agora("tls", "init", str(root)).returncode == 0
    for name, kind in [("master", "master"), ("agent-1", "agent"), ("batch", "framework")] + [
        ("mallory", "client"),
        ("ops", "client"),
        ("alice", "client"),
    ]:
        made = agora("tls", "issue", "--ca", str(root), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    return root


def creds(certs: Path, name: str) -> Credentials:
    return Credentials.load(certs / "ca.pem", certs / f"{name}.pem", certs / f"{name}-key.pem")


@pytest.fixture
async def master(certs, tmp_path):
    acls = tmp_path / "acls.yaml"
    acls.write_text(ACLS)
    m = Master(MasterConfig(port=0, credentials=creds(certs, "master"), acls_path=acls))
    await m.start()
    m.acls_file = acls
    yield m
    await m.stop(0)


def address(master) -> str:
    return f"localhost:{master.port}"  # the name the master's certificate carries


async def subscribe(master, certs, name: str, role: str = "*", framework_id: str = ""):
    channel = open_channel(address(master), creds(certs, name))
    stub = scheduler_pb2_grpc.SchedulerStub(channel)
    info = common_pb2.FrameworkInfo(name=name, user="nobody", role=role, framework_id=framework_id)
    call = stub.Subscribe(scheduler_pb2.SubscribeRequest(framework=info))
    try:
        event = await call.read()
        return channel, stub, event.subscribed
    except grpc.aio.AioRpcError as e:
        await channel.close()
        return None, None, e


def denied(error, *words: str) -> None:
    assert isinstance(error, grpc.aio.AioRpcError), error
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    for word in words:
        assert word in error.details(), (word, error.details())


async def test_framework_registration_task_users_and_failover_follow_the_acls(master, certs):
    channel, stub, subscribed = await subscribe(master, certs, "batch")
    assert subscribed.framework_id
    _, _, refused = await subscribe(master, certs, "mallory")  # role "*": not mallory's
    denied(refused, "mallory may not register framework '*'")
    # Allowed to register in that role or not, nobody takes over batch's framework id.
    master.acls_file.write_text(ACLS.replace("roles: [dev]", "roles: [ANY]"))
    assert master.reload_acls()
    _, _, refused = await subscribe(master, certs, "mallory", framework_id=subscribed.framework_id)
    denied(refused, f"mallory may not fail over to framework {subscribed.framework_id}")
    ids = {"framework_id": subscribed.framework_id, "stream_id": subscribed.stream_id}

    def accept(user: str):
        task = common_pb2.TaskInfo(
            task_id="t", command=common_pb2.CommandInfo(shell="true", user=user)
        )
        operation = scheduler_pb2.Operation(
            launch=scheduler_pb2.Operation.Launch(task_infos=[task])
        )
        return stub.Accept(
            scheduler_pb2.AcceptRequest(**ids, offer_ids=["offer-x"], operations=[operation])
        )

    with pytest.raises(grpc.aio.AioRpcError) as e:
        await accept("root")
    denied(e.value, "batch may not run as user 'root'")
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await accept("")  # the framework's user, nobody: allowed; then the offer is unknown
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # Another principal cannot act for batch even with its ids.
    mallory = open_channel(address(master), creds(certs, "mallory"))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await scheduler_pb2_grpc.SchedulerStub(mallory).Teardown(
            scheduler_pb2.TeardownRequest(**ids)
        )
    denied(e.value, "mallory may not act for framework")
    await mallory.close()
    await channel.close()
    assert (
        master.metrics.registry.get_sample_value(
            "agora_master_authorization_denials_total", {"action": "register_framework"}
        )
        == 1
    )


async def test_operator_changes_and_reads_follow_the_acls(master, certs):
    for name, allowed in (("ops", True), ("alice", False)):
        async with open_channel(address(master), creds(certs, name)) as channel:
            ops = operator_pb2_grpc.OperatorStub(channel)
            calls = [
                (
                    ops.UpdateWeight(operator_pb2.UpdateWeightRequest(role="r", weight=2)),
                    "set weight 'r'",
                ),
                (ops.SetQuota(operator_pb2.SetQuotaRequest(role="analytics")), "set quota"),
                (ops.ListAgents(operator_pb2.ListAgentsRequest()), "read state"),
            ]
            for call, words in calls:
                try:
                    await call
                except grpc.aio.AioRpcError as e:
                    assert not allowed, (name, words, e.details())
                    # alice is named by no rule: turned away at the door, nothing read.
                    denied(e, "alice is named by no rule of this server's ACLs")
                else:
                    assert allowed, (name, words)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await ops.DrainAgent(operator_pb2.DrainAgentRequest(agent_id="agent-x"))
            if allowed:  # past the ACL; then the agent is unknown
                assert e.value.code() == grpc.StatusCode.NOT_FOUND
            else:
                denied(e.value, "alice is named by no rule", "DrainAgent")
    async with open_channel(address(master), creds(certs, "ops")) as channel:
        ops = operator_pb2_grpc.OperatorStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as e:  # quota only for analytics
            await ops.SetQuota(operator_pb2.SetQuotaRequest(role="other"))
        denied(e.value, "ops may not set quota 'other'")


async def test_operators_kill_and_tear_down_others_frameworks_only_as_the_acls_say(master, certs):
    channel, stub, subscribed = await subscribe(master, certs, "batch")
    framework_id = subscribed.framework_id
    for name, allowed in (("alice", False), ("ops", True), ("batch", True)):
        async with open_channel(address(master), creds(certs, name)) as ops_channel:
            ops = operator_pb2_grpc.OperatorStub(ops_channel)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                # By name: the ACL names the framework "batch"; the task does not run.
                await ops.KillTask(operator_pb2.KillTaskRequest(framework="batch", task_id="t9"))
            if allowed:  # ops by the ACL, batch as its own framework; then: no such task
                assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
                assert "no running task 't9'" in e.value.details()
            else:
                denied(e.value, "alice is named by no rule", "KillTask")
    async with open_channel(address(master), creds(certs, "alice")) as ops_channel:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await operator_pb2_grpc.OperatorStub(ops_channel).TeardownFramework(
                operator_pb2.TeardownFrameworkRequest(framework=framework_id)
            )
        denied(e.value, "alice is named by no rule", "TeardownFramework")
    assert framework_id in master.core.reg.frameworks  # a denial changes nothing
    async with open_channel(address(master), creds(certs, "ops")) as ops_channel:
        reply = await operator_pb2_grpc.OperatorStub(ops_channel).TeardownFramework(
            operator_pb2.TeardownFrameworkRequest(framework=framework_id)
        )
    assert reply.framework_id == framework_id
    assert "torn down by ops" in master.core.reg.removed_frameworks[framework_id]
    await channel.close()


async def register_agent(master, certs, name: str, agent_id: str = ""):
    channel = open_channel(address(master), creds(certs, name))
    info = common_pb2.AgentInfo(
        agent_id=agent_id,
        hostname=name,
        resources=[common_pb2.Resource(name="cpus", type=common_pb2.Resource.SCALAR, scalar=1)],
    )
    message = agent_link_pb2.AgentMessage(register=agent_link_pb2.AgentMessage.Register(info=info))
    call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect(iter([message]))
    try:
        reply = await call.read()
        return channel, call, reply
    except grpc.aio.AioRpcError as e:
        await channel.close()
        return None, None, e


async def test_only_allowed_principals_register_agents_under_their_own_ids(master, certs):
    channel, call, reply = await register_agent(master, certs, "agent-1")
    agent_id = reply.registered.agent_id
    assert agent_id
    _, _, refused = await register_agent(master, certs, "mallory")
    denied(refused, "mallory may not register agent")
    # Even with register_agents widened, nobody else takes over agent-1's id.
    master.acls_file.write_text(ACLS.replace("[agent-1]", "[agent-1, mallory]"))
    assert master.reload_acls()
    _, _, refused = await register_agent(master, certs, "mallory", agent_id=agent_id)
    denied(refused, f"mallory may not register as agent {agent_id}, which agent-1 registered")
    call.cancel()
    await channel.close()


async def test_the_acl_file_is_reread_and_a_bad_one_keeps_the_old(master, certs):
    _, _, refused = await subscribe(master, certs, "mallory")
    denied(refused, "mallory")
    master.acls_file.write_text("register_frameworks: [{principals: [mallory]}]")  # no roles
    assert not master.reload_acls()
    _, _, refused = await subscribe(master, certs, "mallory")
    denied(refused, "mallory")  # the old ACLs still hold
    master.acls_file.write_text(ACLS.replace("roles: [dev]", "roles: [ANY]"))
    assert master.reload_acls()
    channel, _, subscribed = await subscribe(master, certs, "mallory")
    assert subscribed.framework_id
    await channel.close()


@pytest.mark.parametrize(
    "text, message",
    [
        ("register_frameworks: [{principals: [a]}]", "register_frameworks[0]: name the roles"),
        ("fly_rockets: []", "unknown action 'fly_rockets'"),
        ("run_tasks: [{principals: [a], users: [x], colour: red}]", "unknown field(s) colour"),
        ("run_tasks: {a: b}", "run_tasks must be a list of rules"),
        ("[unclosed", "not valid YAML"),
        ("register_frameworks: [{principals: [a], roles: [x], names: [ANY]}]", "not ANY"),
        ("run_tasks: [{principals: [a], users: [x], names: [b]}]", "unknown field(s) names"),
    ],
)
def test_a_bad_acl_file_stops_the_master_with_one_line(tmp_path, text, message):
    acls = tmp_path / "acls.yaml"
    acls.write_text(text)
    result = agora("master", "--port", "0", "--acls", str(acls))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


async def test_calls_on_the_calls_stream_follow_the_acls_as_unary_calls_do(master, certs):
    """The Calls stream (master/call_stream.py) runs each call through the same ACLs."""
    channel, stub, subscribed = await subscribe(master, certs, "batch")
    ids = {"framework_id": subscribed.framework_id, "stream_id": subscribed.stream_id}
    task = common_pb2.TaskInfo(task_id="t", command=common_pb2.CommandInfo(shell="true"))
    as_root = common_pb2.TaskInfo()
    as_root.CopyFrom(task)
    as_root.command.user = "root"

    def accept(call_id: int, info: common_pb2.TaskInfo) -> scheduler_pb2.Call:
        launch = scheduler_pb2.Operation.Launch(task_infos=[info])
        request = scheduler_pb2.AcceptRequest(
            **ids, offer_ids=["offer-x"], operations=[scheduler_pb2.Operation(launch=launch)]
        )
        return scheduler_pb2.Call(id=call_id, accept=request)

    calls = stub.Calls()
    await calls.write(scheduler_pb2.CallBatch(calls=[accept(1, as_root), accept(2, task)]))
    root, nobody = (await calls.read()).results
    assert root.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "batch may not run as user 'root'" in root.message
    assert nobody.code == grpc.StatusCode.NOT_FOUND.value[0]  # allowed; the offer is unknown
    calls.cancel()
    # Another principal cannot act for batch on its own stream either.
    async with open_channel(address(master), creds(certs, "mallory")) as mallory:
        theirs = scheduler_pb2_grpc.SchedulerStub(mallory).Calls()
        await theirs.write(scheduler_pb2.CallBatch(calls=[accept(1, task)]))
        [refused] = (await theirs.read()).results
        assert refused.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert "mallory may not act for framework" in refused.message
        theirs.cancel()
    await channel.close()


NAMED_ACLS = """
register_frameworks: [{principals: [batch], roles: ["*"], names: [batch]},
                      {principals: [mallory], roles: [ANY]}]
read_state: [{principals: [ANY]}]
"""


async def subscribe_named(master, certs, principal: str, name: str, service_address: str = ""):
    channel = open_channel(address(master), creds(certs, principal))
    info = common_pb2.FrameworkInfo(
        name=name, user="nobody", role="*", service_address=service_address
    )
    call = scheduler_pb2_grpc.SchedulerStub(channel).Subscribe(
        scheduler_pb2.SubscribeRequest(framework=info)
    )
    try:
        return channel, (await call.read()).subscribed
    except grpc.aio.AioRpcError as e:
        await channel.close()
        return None, e


async def test_a_reserved_framework_name_is_registered_only_by_its_principals(master, certs):
    master.acls_file.write_text(NAMED_ACLS)
    assert master.reload_acls()
    _, refused = await subscribe_named(master, certs, "mallory", "batch")
    denied(refused, "mallory may not use framework name 'batch'", "reserves the name for batch")
    mine, subscribed = await subscribe_named(master, certs, "mallory", "tools")
    assert subscribed.framework_id  # any name not reserved
    theirs, subscribed = await subscribe_named(master, certs, "batch", "batch")
    assert subscribed.framework_id
    for channel in (mine, theirs):
        await channel.close()


async def test_a_framework_api_is_used_only_if_its_certificate_names_who_registered_it(
    master, certs
):
    """`agora job` and the dashboard find the batch API by name through the master: with
    TLS, an API whose certificate names anyone but the framework's principal is refused."""
    from agora.common.credentials import add_port
    from agora.common.rpc import new_server
    from agora.frameworks.sdk import FrameworkNotFound, find_framework_api

    made = agora("tls", "issue", "--ca", str(certs), "--name", "impostor", "--for", "framework")
    assert made.returncode == 0 or "exists" in made.stderr, made.stderr
    master.acls_file.write_text(NAMED_ACLS)
    assert master.reload_acls()
    servers = {}
    for name in ("impostor", "batch"):
        server = new_server()
        port = add_port(server, "127.0.0.1:0", creds(certs, name))
        await server.start()
        servers[name] = (server, f"localhost:{port}")
    try:
        # Registered by batch, but its API is served by another certificate of the same CA.
        channel, _ = await subscribe_named(
            master, certs, "batch", "batch", service_address=servers["impostor"][1]
        )
        with pytest.raises(FrameworkNotFound) as e:
            await asyncio.to_thread(
                find_framework_api, address(master), "batch", credentials=creds(certs, "ops")
            )
        assert "presents a certificate for 'impostor', not for 'batch'" in str(e.value)
        await channel.close()
        channel, _ = await subscribe_named(
            master, certs, "batch", "batch", service_address=servers["batch"][1]
        )
        found = await asyncio.to_thread(
            find_framework_api, address(master), "batch", credentials=creds(certs, "ops")
        )
        assert found == servers["batch"][1]
        await channel.close()
    finally:
        for server, _ in servers.values():
            await server.stop(0)


async def test_under_acls_one_agent_certificate_registers_one_agent(master, certs):
    """A stolen or shared agent certificate must not add agents at will: while agent-1's agent
    is connected a second agent of that certificate is refused; once it is gone for good (a
    machine that lost its work dir), the newcomer replaces it."""
    from master_harness import register_held

    from agora.v1 import operator_pb2

    async def connect():
        return await register_held(address(master), creds(certs, "agent-1"))

    channel, call, first = await connect()
    first_id = first.agent_id
    _, _, refused = await connect()
    denied(refused, f"agent-1 already runs agent {first_id}", "one certificate registers one")
    call.cancel()  # the first agent goes away
    await channel.close()

    async def disconnected() -> bool:
        agent = master.core.reg.agents.get(first_id)
        return agent is not None and agent.session is None

    from harness import eventually_async

    await eventually_async(disconnected, timeout=10, message="the first agent disconnected")
    channel, call, second = await connect()
    assert second.agent_id and second.agent_id != first_id
    ops = open_channel(address(master), creds(certs, "ops"))
    agents = await operator_pb2_grpc.OperatorStub(ops).ListAgents(operator_pb2.ListAgentsRequest())
    assert [a.info.agent_id for a in agents.agents] == [second.agent_id]
    call.cancel()
    await channel.close()
    await ops.close()
