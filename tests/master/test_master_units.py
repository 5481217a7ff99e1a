"""Pure parts of the master: Accept planning, shortfall messages, the SQLite state store."""

from __future__ import annotations

import json
import time
import uuid

import grpc
import pytest

from agora.common import Resources
from agora.master.config import MasterConfig
from agora.master.errors import CallError
from agora.master.offers import plan_launch, shortfall
from agora.master.registry import Offer, Registry, Task
from agora.master.state_store import StateStore
from agora.v1 import common_pb2, operator_pb2, scheduler_pb2


def offer(
    offer_id: str,
    agent_id: str = "a1",
    framework_id: str = "f1",
    resources: str = "cpus:2;mem:1024;ports:[31000-31009]",
) -> Offer:
    return Offer(offer_id, framework_id, agent_id, Resources.parse(resources), created_at=0.0)


def accept(offer_ids, *tasks, refuse=None) -> scheduler_pb2.AcceptRequest:
    filters = common_pb2.Filters()
    if refuse is not None:
        filters.refuse_seconds = refuse
    return scheduler_pb2.AcceptRequest(
        framework_id="f1",
        offer_ids=offer_ids,
        filters=filters,
        operations=[
            scheduler_pb2.Operation(launch=scheduler_pb2.Operation.Launch(task_infos=list(tasks)))
        ],
    )


def task(task_id: str, resources: str) -> common_pb2.TaskInfo:
    return common_pb2.TaskInfo(
        task_id=task_id,
        resources=Resources.parse(resources).to_proto(),
        command=common_pb2.CommandInfo(argv=["true"]),
    )


def test_tasks_spanning_two_offers_of_one_agent_are_merged():
    offers = {"o1": offer("o1", resources="cpus:1;mem:512"), "o2": offer("o2")}
    plan = plan_launch(
        "f1",
        accept(
            ["o1", "o2"],
            task("t1", "cpus:2;mem:1024"),
            task("t2", "cpus:1;mem:12;ports:[31000-31000]"),
        ),
        offers,
        {},
        set(),
        5.0,
    )
    assert plan.agent_id == "a1" and [t.task_id for t, _ in plan.tasks] == ["t1", "t2"]
    assert plan.unused == Resources.parse("mem:500;ports:[31001-31009]")
    assert plan.refuse_seconds == 5.0


def test_shortfall_names_what_is_missing():
    have = Resources.parse("cpus:1;mem:100;ports:[31000-31001]")
    need = Resources.parse("cpus:2.5;mem:50;ports:[31001-31003]")
    assert shortfall(have, need) == "cpus:1.5;ports:[31002-31003]"


@pytest.mark.parametrize("refuse", [-1.0, float("nan"), float("inf")])
def test_bad_refuse_seconds_are_invalid(refuse):
    with pytest.raises(CallError) as e:
        plan_launch("f1", accept(["o1"], refuse=refuse), {"o1": offer("o1")}, {}, set(), 5.0)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_state_store_round_trips_and_remembers_removals(tmp_path):
    path = tmp_path / "s" / "master.sqlite3"
    store = StateStore(path)
    store.put_agent(common_pb2.AgentInfo(agent_id="a1", hostname="h"), 1.0)
    store.put_framework(
        common_pb2.FrameworkInfo(framework_id="f1", name="n", failover_timeout_seconds=60), 2.0
    )
    store.put_framework(common_pb2.FrameworkInfo(framework_id="f2", name="m"), 3.0)
    store.remove_framework("f2", "torn down")
    store.put_weight("r", 2.5)
    store.put_quota("r", operator_pb2.Quota(guarantee=Resources.parse("cpus:1").to_proto()))
    store.close()

    store = StateStore(path)
    assert [a.info.hostname for a in store.agents()] == ["h"]
    [f1] = store.frameworks()
    assert (f1.info.framework_id, f1.info.failover_timeout_seconds) == ("f1", 60)
    assert store.removed("framework") == {"f2": "torn down"}
    assert store.weights() == {"r": 2.5}
    assert Resources.from_proto(store.quotas()["r"].guarantee) == Resources.parse("cpus:1")
    store.close()


@pytest.mark.parametrize(
    "field, value",
    [
        ("heartbeat_interval_seconds", 0),
        ("agent_timeout_seconds", 0.1),
        ("port", 70000),
        ("allocation_batch_seconds", -1),
        ("offer_timeout_seconds", 0),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        MasterConfig(**{field: value}).validate()


def test_registry_indexes_follow_offers_and_tasks_through_every_change():
    reg = Registry()
    for offer_id, agent_id, framework_id in (
        ("o1", "a1", "f1"),
        ("o2", "a1", "f2"),
        ("o3", "a2", "f1"),
    ):
        reg.add_offer(offer(offer_id, agent_id, framework_id))
    reg.drop_offer("o1", "declined")
    assert [o.offer_id for o in reg.offers_of_agent("a1")] == ["o2"]
    assert [o.offer_id for o in reg.offers_of_framework("f1")] == ["o3"]
    assert reg.gone_offers["o1"] == "declined"

    def live(task_id, agent_id, framework_id="f1"):
        info = common_pb2.TaskInfo(task_id=task_id)
        return Task(framework_id, agent_id, info, Resources.parse("cpus:1"))

    t1, t2, t3 = live("t1", "a1"), live("t2", "a1"), live("t3", "a2", "f2")
    for t in (t1, t2, t3):
        reg.add_task(t)
    reg.move_task(t2, "a2")  # an agent re-registered with it
    assert reg.tasks_of_agent("a1") == [t1]
    assert reg.tasks_of_agent("a2") == [t3, t2]
    reg.complete_task(t3)
    assert reg.tasks_of_agent("a2") == [t2] and reg.tasks_of_framework("f2") == []
    assert reg.find_task("f2", "t3") is t3
    again = live("t1", "a2")  # a live task replaced under the same key
    reg.add_task(again)
    assert reg.tasks_of_agent("a1") == [] and reg.tasks_of_framework("f1") == [again, t2]
    assert reg.allocated_on_agent("a2") == {"f1": Resources.parse("cpus:2")}


def test_a_state_store_that_cannot_be_used_is_an_oserror(tmp_path):
    (tmp_path / "dir" / "master.sqlite3").mkdir(parents=True)
    with pytest.raises(OSError, match="cannot open the state store"):
        StateStore(tmp_path / "dir" / "master.sqlite3")
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not sqlite " * 300)
    with pytest.raises(OSError, match="not a database"):
        StateStore(garbage)


# --- the registry store seam: every implementation passes the same contract -------------------


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "zookeeper"])
def registry_store(request, tmp_path):
    from agora.master.registry_store import open_store

    if request.param == "zookeeper":
        from agora.common.election import zk_client
        from agora.master.zk_store import ZkRegistryStore

        zk = zk_client(request.getfixturevalue("zookeeper").address, 5.0)
        zk.start(10)
        try:
            yield ZkRegistryStore(zk, f"/contract-{uuid.uuid4().hex}")
        finally:
            zk.stop()
            zk.close()
        return
    store = open_store(tmp_path / "master.sqlite3" if request.param == "sqlite-file" else None)
    yield store
    store.close()


def test_registry_store_contract(registry_store):
    from agora.master.registry_store import RegistryStore
    from agora.v1 import common_pb2, operator_pb2

    store: RegistryStore = registry_store
    store.put_agent(common_pb2.AgentInfo(agent_id="a1", hostname="h1"), 1.0)
    store.put_agent(common_pb2.AgentInfo(agent_id="a1", hostname="h1b"), 2.0, "agent-1")
    store.put_framework(common_pb2.FrameworkInfo(framework_id="f1", name="web"), 3.0, "ops")
    assert [(a.info.hostname, a.registered_at, a.principal) for a in store.agents()] == [
        ("h1b", 2.0, "agent-1")
    ]
    assert [(f.info.name, f.principal) for f in store.frameworks()] == [("web", "ops")]
    store.remove_agent("a1", "gone")
    store.remove_framework("f1", "torn down")
    assert store.agents() == [] and store.frameworks() == []
    assert store.removed("agent") == {"a1": "gone"}
    assert store.removed("framework") == {"f1": "torn down"}
    store.put_weight("analytics", 2.0)
    quota = operator_pb2.Quota(guarantee=[common_pb2.Resource(name="cpus", scalar=4)])
    store.put_quota("analytics", quota)
    assert store.weights() == {"analytics": 2.0}
    assert store.quotas() == {"analytics": quota}
    store.put_quota("analytics", None)
    assert store.quotas() == {}
    store.put_weight("eng/backend", 3.0)  # hierarchical role names hold a '/'
    assert store.weights() == {"analytics": 2.0, "eng/backend": 3.0}
    store.put_agent(common_pb2.AgentInfo(agent_id="a2", hostname="h2"), 4.0)
    store.put_drained("a2", True)
    store.put_drained("a2", True)  # twice is once
    assert store.drained() == {"a2": 0.0}  # no deadline
    store.put_drained("a2", True, deadline=1_790_000_000.5)  # draining again: a new deadline
    assert store.drained() == {"a2": 1_790_000_000.5}
    store.put_drained("a2", False)
    assert store.drained() == {}
    store.put_drained("a2", True)
    store.remove_agent("a2", "decommissioned")  # a removed agent is no longer drained
    assert store.drained() == {}
    # Removals come back oldest first, and past the master's bound the oldest are forgotten.
    assert list(store.removed("agent").items()) == [("a1", "gone"), ("a2", "decommissioned")]
    store.forget_removed("agent", ["a1"])
    assert store.removed("agent") == {"a2": "decommissioned"}
    assert store.removed("framework") == {"f1": "torn down"}
    # Recent preemptions, oldest first; a later put of one replaces it (its end seen).
    first = operator_pb2.PreemptionSummary(at=10.0, framework_id="f1", task_id="t1", message="m")
    second = operator_pb2.PreemptionSummary(at=5.0, framework_id="f/2", task_id="t:2")
    store.put_preemption(first)
    store.put_preemption(second)
    first.ended_at = 11.0
    store.put_preemption(first)
    assert store.preemptions() == [second, first]
    store.forget_preemptions([("f/2", "t:2")])
    assert store.preemptions() == [first]
    # A join token is spent once, whichever master (or call) gets there first.
    later = time.time() + 600
    assert store.spend_join_token("token-1", later)
    assert not store.spend_join_token("token-1", later)
    assert store.spend_join_token("token-2", later)
    assert store.describe()


def test_authorization_is_decided_in_one_place_and_refusals_name_who_what_and_which():
    from agora.master.authz import Action, AllowAll, Decision, check

    check(AllowAll(), "", Action.SET_QUOTA, "analytics")  # the default allows, as before ACLs

    class OnlyOps:
        def authorize(self, principal, action, obj):
            ok = principal == "ops" or action is Action.READ_STATE
            return Decision(ok, "" if ok else "only ops may change the cluster")

    check(OnlyOps(), "ops", Action.DRAIN_AGENT, "agent-1")
    check(OnlyOps(), "", Action.READ_STATE, "")
    with pytest.raises(CallError) as e:
        check(OnlyOps(), "alice", Action.SET_WEIGHT, "analytics")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert e.value.message == (
        "alice may not set weight 'analytics': only ops may change the cluster"
    )
    with pytest.raises(CallError, match="an anonymous caller may not drain agent 'agent-1'"):
        check(OnlyOps(), "", Action.DRAIN_AGENT, "agent-1")


async def test_the_master_asks_its_authorizer_before_an_operator_change():
    from agora.master import Master, MasterConfig
    from agora.master.authz import Action, Decision
    from agora.v1 import operator_pb2, operator_pb2_grpc

    asked = []

    class ReadOnly:
        def authorize(self, principal, action, obj):
            asked.append((principal, action, obj))
            return Decision(action is Action.READ_STATE, "this cluster is read-only")

    master = Master(MasterConfig(port=0), authorizer=ReadOnly())
    await master.start()
    try:
        async with grpc.aio.insecure_channel(master.address) as channel:
            stub = operator_pb2_grpc.OperatorStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.UpdateWeight(operator_pb2.UpdateWeightRequest(role="ops", weight=2))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "an anonymous caller may not set weight 'ops'" in e.value.details()
        assert asked == [("", Action.SET_WEIGHT, "ops")]
        assert (
            master.core.allocator.role_summaries()[0]["weight"] != 2
            if master.core.allocator.role_summaries()
            else True
        )
    finally:
        await master.stop(0)


def test_share_history_aligns_series_and_keeps_a_window():
    from agora.master.dashboard import ShareHistory

    history = ShareHistory(window=3.0, interval=1.0)  # three samples at most
    history.add(1.0, {"*": 0.1}, {"a": 0.1})
    history.add(2.0, {"*": 0.2, "ops": 0.5}, {"a": 0.2})
    history.add(3.0, {"*": 0.3}, {"b": 0.3})
    history.add(4.0, {"*": 0.4}, {"b": 0.4})
    series = history.series()
    assert series["at"] == [2.0, 3.0, 4.0]
    assert series["roles"] == {"*": [0.2, 0.3, 0.4], "ops": [0.5, None, None]}
    assert series["frameworks"] == {"a": [0.2, None, None], "b": [None, 0.3, 0.4]}


def test_the_dashboard_hides_every_environment_value_but_keeps_the_names():
    """Every env or environment map, at any depth (a job's own env, its command's, an app's),
    as the dashboard shows jobs and apps (MessageToDict of the redacted message)."""
    from google.protobuf.json_format import MessageToDict

    from agora.common.redaction import without_environments
    from agora.v1 import batch_pb2, services_pb2

    job = batch_pb2.Job(job_id="j", spec=batch_pb2.JobSpec(name="n"))
    job.spec.task.env.update({"DB_PASSWORD": "hunter2", "MODE": "x"})
    job.spec.task.command.environment["TOKEN"] = "abc"
    app = services_pb2.AppStatus(app=services_pb2.App(id="web", env={"API_KEY": "s3cret"}))
    shown = json.dumps([MessageToDict(without_environments(m)) for m in (job, app)])
    assert "hunter2" not in shown and "abc" not in shown and "s3cret" not in shown
    assert "DB_PASSWORD" in shown and "TOKEN" in shown and '"name": "n"' in shown
    assert job.spec.task.env["DB_PASSWORD"] == "hunter2"  # the original is left as it was


def test_a_state_dir_from_before_drain_deadlines_and_principals_keeps_its_entries(tmp_path):
    import sqlite3

    from agora.master.registry_store import open_store

    path = tmp_path / "master.sqlite3"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE drained (agent_id TEXT PRIMARY KEY)")
    old.execute("INSERT INTO drained VALUES ('a1')")
    old.execute(
        "CREATE TABLE agents (agent_id TEXT PRIMARY KEY, info BLOB NOT NULL, "
        "registered_at REAL NOT NULL)"
    )
    info = common_pb2.AgentInfo(agent_id="a1", hostname="h1")
    old.execute("INSERT INTO agents VALUES ('a1', ?, 1.0)", (info.SerializeToString(),))
    old.commit()
    old.close()
    store = open_store(path)
    try:
        assert store.drained() == {"a1": 0.0}
        store.put_drained("a2", True, deadline=5.0)
        assert store.drained() == {"a1": 0.0, "a2": 5.0}
        # Agents registered before principals were kept: none is known for them.
        assert [(a.info.hostname, a.principal) for a in store.agents()] == [("h1", "")]
    finally:
        store.close()


def test_a_zookeeper_node_written_before_principals_reads_as_having_none():
    from agora.master.zk_store import _STAMP, _entry, _unentry

    info = common_pb2.AgentInfo(agent_id="a1", hostname="h1").SerializeToString()
    assert _unentry(_STAMP.pack(2.0) + info) == (2.0, "", info)  # the old layout
    assert _unentry(_entry(2.0, "agent-1", info)) == (2.0, "agent-1", info)
    assert _unentry(_entry(2.0, "", info)) == (2.0, "", info)
