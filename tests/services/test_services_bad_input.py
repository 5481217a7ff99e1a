"""Bad input to the Services API gets the right gRPC code and a message that says what to change,
and nothing is stored half-way."""

from __future__ import annotations

import grpc
import pytest
from services_cluster import ServiceCluster, web_app

from agora.v1 import common_pb2, services_pb2

S = services_pb2


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    await c.start_agent(0)
    await c.start_services()
    yield c
    await c.stop()


async def refused(call, code: grpc.StatusCode, *words: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value.details()
    for word in words:
        assert word in e.value.details()
    return e.value.details()


def app(**fields) -> S.App:
    base = dict(id="bad", cmd="sleep 100", instances=0, cpus=0.1, mem=32)
    base.update(fields)
    return S.App(**base)


@pytest.mark.parametrize(
    "fields,words",
    [
        (dict(cmd=""), ["has no command"]),
        (dict(cpus=0), ["cpus must be more than 0"]),
        (dict(mem=-1), ["mem must be more than 0"]),
        (dict(instances=-2), ["instances must be between 0 and 10000"]),
        (dict(instances=2**31 - 1), ["instances must be between 0 and 10000, got 2147483647"]),
        (dict(id="Not OK"), ["app id 'Not OK' is not valid"]),
        (
            dict(constraints=[S.Constraint(field="hostname", operator="CLOSE_TO")]),
            ["unknown operator 'CLOSE_TO'", "UNIQUE"],
        ),
        (
            dict(health_check=common_pb2.HealthCheck(tcp=common_pb2.TcpCheck(port_index=0))),
            ["PORT0", "0 port(s)"],
        ),
    ],
)
async def test_invalid_apps_are_invalid_argument_and_not_stored(cluster, fields, words):
    await refused(cluster.put(app(**fields)), grpc.StatusCode.INVALID_ARGUMENT, *words)
    listed = await cluster.stub.ListApps(S.ListAppsRequest())
    assert list(listed.apps) == []


async def test_more_than_any_agent_has_is_failed_precondition(cluster):
    await refused(
        cluster.put(app(cpus=64)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "more than any agent has",
        "host-0",
    )
    assert list((await cluster.stub.ListApps(S.ListAppsRequest())).apps) == []


async def test_duplicate_create_is_already_exists_and_leaves_the_app_alone(cluster):
    first = await cluster.put(app(), create_only=True)
    assert first.created
    await refused(
        cluster.put(app(cmd="sleep 200"), create_only=True),
        grpc.StatusCode.ALREADY_EXISTS,
        "already exists",
    )
    status = await cluster.get("bad")
    assert status.app.cmd == "sleep 100" and status.app.version == first.app.version
    # Without create_only the same call updates.
    second = await cluster.put(app(cmd="sleep 200"))
    assert not second.created and second.app.version != first.app.version


async def test_same_definition_keeps_its_version_and_scale_does_too(cluster):
    first = await cluster.put(app())
    again = await cluster.put(app(instances=3))
    assert again.app.version == first.app.version and not again.deploying
    scaled = await cluster.stub.ScaleApp(S.ScaleAppRequest(id="bad", instances=1))
    assert scaled.app.version == first.app.version and scaled.app.instances == 1


async def test_unknown_app_is_not_found(cluster):
    stub = cluster.stub
    for call in (
        stub.GetApp(S.GetAppRequest(id="nope")),
        stub.ScaleApp(S.ScaleAppRequest(id="nope", instances=1)),
        stub.DeleteApp(S.DeleteAppRequest(id="nope")),
        stub.GetEndpoints(S.GetEndpointsRequest(app_id="nope")),
    ):
        await refused(call, grpc.StatusCode.NOT_FOUND, "no app 'nope'")
    stream = stub.WatchEndpoints(S.WatchEndpointsRequest(app_id="nope"))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        async for _ in stream:
            pass
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_negative_or_huge_scale_is_refused(cluster):
    await cluster.put(app())
    for instances in (-1, 2**31 - 1):
        await refused(
            cluster.stub.ScaleApp(S.ScaleAppRequest(id="bad", instances=instances)),
            grpc.StatusCode.INVALID_ARGUMENT,
            f"between 0 and 10000, got {instances}",
        )
    assert (await cluster.get("bad")).app.instances == 0


async def test_the_daemon_keeps_serving_after_bad_input(cluster):
    await refused(cluster.put(app(cpus=-1)), grpc.StatusCode.INVALID_ARGUMENT)
    reply = await cluster.put(web_app("fine", 1))
    assert reply.created
    await cluster.healthy_endpoints("fine", 1)


async def test_a_backtracking_like_pattern_stalls_nothing(cluster):
    """The probe's `(?:.?){56}X` froze the master's loop for 55 s with a backtracking engine
    (agents removed, a bystander's task lost). With RE2 it is one more constraint that fits no
    agent, said as such, and the bystander runs on."""
    from harness import eventually_async

    await cluster.put(app(id="bystander", instances=1))

    async def bystander_running():
        status = await cluster.get("bystander")
        return status if status.running == 1 else None

    before = (await eventually_async(bystander_running, timeout=30)).tasks[0].task_id
    hostile = S.Constraint(field="hostname", operator="LIKE", value="(?:.?){56}X")
    await cluster.put(app(id="hostile", instances=1, constraints=[hostile]))

    async def said_why():
        status = await cluster.get("hostile")
        return status if "(?:.?){56}X" in status.waiting_reason else None

    waiting = await eventually_async(said_why, timeout=30, message="the constraint judged")
    assert waiting.running == 0
    after = await cluster.get("bystander")
    assert [t.task_id for t in after.tasks] == [before] and after.running == 1


async def test_patterns_past_their_budget_are_refused_and_hold_nothing(cluster):
    """The probe's PutApp of 1.4 KB carried 40 patterns such as `(?:\\pL){300}N`: each 12
    characters, each 358,805 RE2 instructions; it held the daemon 4 s and 165 MB. Now each
    pattern and each app has a budget, said in the refusal; small patterns still work."""
    hostile = [
        S.Constraint(field="rack", operator="LIKE", value=rf"(?:\pL){{300}}N{i}") for i in range(40)
    ]
    await refused(
        cluster.put(app(id="hostile", constraints=hostile)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "constraints[0]",
        "too large for RE2's budget",
    )
    many = [S.Constraint(field="rack", operator="LIKE", value=f"r{i}") for i in range(17)]
    await refused(
        cluster.put(app(id="many", constraints=many)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "17 LIKE/UNLIKE constraints; at most 16",
    )
    fine = [S.Constraint(field="rack", operator="LIKE", value="rack-(a|b)[0-9]+")]
    assert (await cluster.put(app(id="fine", constraints=fine))).created


async def test_an_app_id_of_megabytes_is_refused_without_being_echoed(cluster):
    huge = "a" * (10 * 1024 * 1024)
    for call in (cluster.get(huge), cluster.stub.DeleteApp(S.DeleteAppRequest(id=huge))):
        details = await refused(call, grpc.StatusCode.INVALID_ARGUMENT, "id: 10485760 characters")
        assert len(details) < 200
