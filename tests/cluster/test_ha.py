"""Issue 10 end to end: three `agora master --zk` processes on a real ZooKeeper, real agents
and a real SDK framework pointed at the set; the leader killed, cut off from ZooKeeper, and
ZooKeeper itself restarted, with tasks running.

Each test has its own election path on the session's shared ZooKeeper (tests/conftest.py),
except the ZooKeeper restart, which needs a server of its own.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from e2e_framework import Recorder, running
from ha import MasterSet, ZkProxy, agora
from harness import eventually, eventually_async

from agora.common.errors import Reason, error_metadata, reason_of
from agora.common.zookeeper_server import ZooKeeperServer
from agora.frameworks.sdk import TaskSpec, new_task_id
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc

pytestmark = pytest.mark.e2e


@pytest.fixture
def masters(tmp_path, zookeeper):
    ms = MasterSet(tmp_path, zookeeper.address).start()
    yield ms
    ms.stop()


async def until(predicate, timeout: float = 30, message: str = "") -> None:
    """Waits for `predicate` (which may run a command: it runs in a thread, so the framework on
    this test's event loop keeps handling events and acknowledging updates meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(predicate):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {message or predicate}")
        await asyncio.sleep(0.2)


def agents_json(master: str) -> list[dict]:
    out = agora("cluster", "agents", "--json", "--master", master, "--timeout", "5")
    return json.loads(out.stdout) if out.returncode == 0 else []


def tasks_json(master: str) -> list[dict]:
    out = agora("cluster", "tasks", "--json", "--master", master, "--timeout", "5")
    return json.loads(out.stdout) if out.returncode == 0 else []


def task_state(master: str, task_id: str) -> str | None:
    return next((t["state"] for t in tasks_json(master) if t["task_id"] == task_id), None)


def sleeper(seconds: int = 600) -> TaskSpec:
    task_id = new_task_id("ha")
    return TaskSpec(name=task_id, task_id=task_id, cpus=0.1, mem=32, command=f"sleep {seconds}")


def test_three_masters_elect_one_leader_the_others_stand_by_and_name_it(masters):
    leader = masters.leader_index()
    standby = next(i for i in range(3) if i != leader)

    # Asked through a standby, a list or ZooKeeper: the same roster, the leader first.
    for via in (masters.addresses[standby], masters.as_list, masters.url):
        rows = masters.roster(via)
        assert [r["leading"] for r in rows] == [True, False, False]
        assert {r["address"] for r in rows} == set(masters.addresses)
        assert rows[0]["address"] == masters.addresses[leader]
        assert rows[0]["elected_at"] and rows[1]["elected_at"] is None
    out = agora("cluster", "masters", "--master", masters.url)
    assert "leader" in out.stdout and out.stdout.count("standby") == 2, out.stdout
    state = json.loads(agora("cluster", "state", "--json", "--master", masters.url).stdout)
    assert state["leader"] == masters.addresses[leader]
    assert len(state["masters"]) == 3

    # A standby itself refuses every call with UNAVAILABLE, naming the leader.
    with grpc.insecure_channel(masters.addresses[standby]) as channel:
        with pytest.raises(grpc.RpcError) as e:
            operator_pb2_grpc.OperatorStub(channel).GetState(operator_pb2.GetStateRequest())
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert reason_of(e.value) == Reason.NOT_LEADER
    assert error_metadata(e.value)["leader"] == masters.addresses[leader]
    assert masters.addresses[leader] in e.value.details()


def test_a_malformed_zk_url_is_a_one_line_error_with_exit_2(tmp_path):
    for bad in ("zk://h1:2181", "zk://h1/agora", "http://h1:2181/agora", "zk:///agora"):
        out = agora("master", "--zk", bad, "--port", "0")
        assert out.returncode == 2, (bad, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "--zk" in out.stderr
    out = agora("cluster", "state", "--master", "h1:5050,h1:5050")
    assert out.returncode == 2 and "names a master twice" in out.stderr


async def test_sdk_and_cli_pointed_at_a_standby_follow_it_to_the_leader(masters):
    leader = await asyncio.to_thread(masters.leader_index)
    standby = masters.addresses[(leader + 1) % 3]
    masters.start_agent(0, master=masters.as_list)  # an agent given the plain list
    await until(lambda: len(agents_json(standby)) == 1, timeout=30, message="agent registered")
    async with running(Recorder(), master=standby, name="follower") as fw:
        spec = sleeper()
        await fw.launch(spec)
        await eventually_async(
            lambda: any(u.state == common_pb2.TASK_RUNNING for u in fw.updates), timeout=30
        )
    tasks = await asyncio.to_thread(tasks_json, standby)
    assert [t["task_id"] for t in tasks] == [spec.task_id]


async def test_leader_killed_mid_launch_loses_nothing_and_runs_nothing_twice(masters):
    first = await asyncio.to_thread(masters.leader_index)
    for i in range(2):
        masters.start_agent(i)
    await until(lambda: len(agents_json(masters.url)) == 2, timeout=30, message="2 agents")
    agent_ids = sorted(a["agent_id"] for a in agents_json(masters.url))
    # Registry state the next leader must find: a weight and a drained agent.
    assert agora("cluster", "weight", "analytics", "3", "--master", masters.url).returncode == 0
    async with running(Recorder(), master=masters.url, name="ha", failover_timeout=60) as fw:
        framework_id = fw.framework_ids[0]
        running_before = [sleeper() for _ in range(3)]
        for spec in running_before:
            await fw.launch(spec)
        await eventually_async(
            lambda: sum(u.state == common_pb2.TASK_RUNNING for u in fw.updates) >= 3, timeout=30
        )
        # Mid-launch: the Accept has been answered, the task may not have reached its agent.
        in_flight = sleeper()
        await fw.launch(in_flight)
        masters.masters[first].kill()  # kill -9

        second = await asyncio.to_thread(masters.leader_index)
        assert second != first
        await eventually_async(
            lambda: fw.framework_ids.count(framework_id) >= 2, timeout=30, message="resubscribed"
        )
        await until(
            lambda: sorted(a["agent_id"] for a in agents_json(masters.url)) == agent_ids,
            timeout=30,
            message="both agents back with their ids",
        )
        after = sleeper()
        await fw.launch(after)  # offers flow again
        await eventually_async(
            lambda: any(
                u.task_id == after.task_id and u.state == common_pb2.TASK_RUNNING
                for u in fw.updates
            ),
            timeout=30,
        )

        # The in-flight task either made it (running) or the new leader knows nothing of it
        # (TASK_UNKNOWN once every agent is back): explicit reconciliation says which.
        async def heard_of_in_flight() -> bool:
            await fw.driver.reconcile([(in_flight.task_id, "")])
            await asyncio.sleep(0.3)
            return any(u.task_id == in_flight.task_id for u in fw.updates)

        for _ in range(30):
            if await heard_of_in_flight():
                break
        else:
            raise AssertionError("the framework heard nothing about the task launched mid-kill")
        for spec in [*running_before, after]:
            await until(lambda s=spec: task_state(masters.url, s.task_id) == "TASK_RUNNING")
    tasks = {t["task_id"]: t for t in await asyncio.to_thread(tasks_json, masters.url)}
    assert list(tasks).count(in_flight.task_id) <= 1
    lost = [u.task_id for u in fw.updates if u.state == common_pb2.TASK_LOST]
    assert not set(lost) & {s.task_id for s in [*running_before, after]}
    roles = json.loads(agora("cluster", "roles", "--json", "--master", masters.url).stdout)
    assert {r["role"]: r["weight"] for r in roles}.get("analytics") == 3


async def test_a_leader_cut_off_from_zookeeper_steps_down_and_disturbs_no_one(tmp_path, zookeeper):
    proxy = ZkProxy(zookeeper.address)
    ms = MasterSet(tmp_path, zookeeper.address)
    try:
        # Master 0 reaches ZooKeeper only through the proxy, and leads (it starts first).
        ms.start_master(0, zk_url=ms.url.replace(zookeeper.address, proxy.address))
        assert (await asyncio.to_thread(ms.leader_index)) == 0
        ms.start_master(1)
        ms.start_master(2)
        ms.start_agent(0)
        await until(lambda: len(agents_json(ms.url)) == 1, timeout=30, message="agent")
        async with running(Recorder(), master=ms.url, name="cut", failover_timeout=60) as fw:
            spec = sleeper()
            await fw.launch(spec)
            framework_id = fw.framework_ids[0]
            proxy.cut()
            # It stepped down (re-executing itself as a standby) and another master leads.
            await until(
                lambda: "stepping down" in ms.masters[0].log_path.read_text(),
                timeout=30,
                message="the cut-off leader stepped down",
            )
            assert (await asyncio.to_thread(ms.leader_index)) in (1, 2)
            # It re-executes itself: until the standby listens, its address refuses (a second
            # or more on a slow machine), so the call waits for it to be ready.
            with grpc.insecure_channel(ms.addresses[0]) as channel:
                with pytest.raises(grpc.RpcError) as e:
                    operator_pb2_grpc.OperatorStub(channel).GetState(
                        operator_pb2.GetStateRequest(), timeout=30, wait_for_ready=True
                    )
            assert reason_of(e.value) == Reason.NOT_LEADER
            await eventually_async(
                lambda: fw.framework_ids.count(framework_id) >= 2, timeout=30, message="moved"
            )
            await until(lambda: len(agents_json(ms.url)) == 1, timeout=30, message="agent moved")
            subscriptions = len(fw.framework_ids)
            proxy.heal()
            # Once healed, the old leader only stands by: nothing moves back, the task runs on.
            await until(lambda: len(ms.roster()) == 3, timeout=30, message="it stands again")
            roster = await asyncio.to_thread(ms.roster)
            assert roster[0]["address"] != ms.addresses[0]
            assert len(fw.framework_ids) == subscriptions and set(fw.framework_ids) == {
                framework_id
            }
            await until(lambda: task_state(ms.url, spec.task_id) == "TASK_RUNNING")
            assert not [u for u in fw.updates if u.state == common_pb2.TASK_LOST]
    finally:
        ms.stop()
        proxy.close()


async def test_zookeeper_restarted_under_a_running_cluster(tmp_path):
    zk = ZooKeeperServer(tmp_path / "zk").start()
    ms = MasterSet(tmp_path, zk.address)
    try:
        ms.start()
        (await asyncio.to_thread(ms.leader_index))
        ms.start_agent(0)
        await until(lambda: len(agents_json(ms.url)) == 1, timeout=30, message="agent")
        agent_id = agents_json(ms.url)[0]["agent_id"]
        async with running(Recorder(), master=ms.url, name="zkr", failover_timeout=60) as fw:
            spec = sleeper()
            await fw.launch(spec)
            framework_id = fw.framework_ids[0]
            await asyncio.to_thread(zk.stop)
            await asyncio.sleep(3)  # longer than the session timeout: the leader steps down
            await asyncio.to_thread(zk.start)
            (await asyncio.to_thread(ms.leader_index))
            await until(
                lambda: [a["agent_id"] for a in agents_json(ms.url)] == [agent_id],
                timeout=60,
                message="the agent re-attached",
            )
            await eventually_async(
                lambda: fw.framework_ids.count(framework_id) >= 2, timeout=60, message="resub"
            )
            await until(lambda: task_state(ms.url, spec.task_id) == "TASK_RUNNING")
            assert not [u for u in fw.updates if u.state == common_pb2.TASK_LOST]
    finally:
        ms.stop()
        zk.stop()


def test_a_master_started_before_zookeeper_says_so_and_leads_once_it_is_up(tmp_path):
    from ha import free_port
    from harness import Daemon

    zk = ZooKeeperServer(tmp_path / "zk", port=free_port())
    url = f"zk://{zk.address}/late"
    master = Daemon(["master", "--zk", url, "--port", "0"], tmp_path / "master.log")
    agent = Daemon(
        ["agent", "--master", url, "--port", "0", "--work-dir", str(tmp_path / "agent")]
        + ["--resources", "cpus:1;mem:512;disk:512"],
        tmp_path / "agent.log",
    )
    try:
        master.start(timeout=60)  # stands by (its port answers) while ZooKeeper is away
        agent.start(timeout=60)  # and so does an agent pointed at the set
        stderr = tmp_path / "master.log"
        eventually(
            lambda: "unreachable; still trying" in stderr.read_text(),
            timeout=30,
            message="the master to say ZooKeeper is unreachable",
        )
        assert master.alive()
        zk.start()
        eventually(
            lambda: any("master leading on" in line for line in master.lines),
            timeout=30,
            message="the master to lead once ZooKeeper is up",
        )
        eventually(lambda: len(agents_json(url)) == 1, timeout=30, message="the agent registered")
    finally:
        agent.stop()
        master.stop()
        zk.stop()


def test_agents_behind_a_relay_follow_the_leader_through_it(masters, tmp_path):
    """The relay takes the master set as a list, finds the leader (a standby's refusal names
    it) and, when the leader is killed, carries its agents to the next one."""
    from harness import Daemon

    leader = masters.leader_index()
    relay = Daemon(
        ["relay", "--master", masters.as_list, "--port", "0", "--log-level", "debug"],
        tmp_path / "logs" / "relay.log",
    ).start()
    try:
        agent = masters.start_agent(0, master=relay.address)
        eventually(
            lambda: [a["state"] for a in agents_json(masters.url)] == ["ACTIVE"],
            timeout=30,
            message="the agent registered through the relay",
        )
        agent_id = agents_json(masters.url)[0]["agent_id"]
        masters.masters[leader].kill()
        new_leader = masters.leader_index()
        assert new_leader != leader
        eventually(
            lambda: (
                [(a["agent_id"], a["state"]) for a in agents_json(masters.url)]
                == [(agent_id, "ACTIVE")]
            ),
            timeout=30,
            message="the agent back, through the relay, with the new leader",
        )
        assert agent.alive()
    finally:
        relay.stop()


def test_the_event_stream_resumes_across_a_failover_without_gaps_or_duplicates(masters):
    """Issue 38: a watcher that saw events from one leader resumes from its last index on the
    next, with every event in between (the old leader's last ones too) and nothing twice."""

    def events(since: int) -> list[dict]:
        out = agora("cluster", "events", "--json", "--since", str(since), "--master", masters.url)
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]

    first = masters.leader_index()
    masters.start_agent(0)
    assert agora("cluster", "weight", "web", "2", "--master", masters.url).returncode == 0
    seen = eventually(
        lambda: (e := events(0)) and any(x["kind"] == "AGENT_ADDED" for x in e) and e,
        timeout=30,
        message="the agent's event",
    )
    kept = [e for e in seen if e["topic"] != "stream"]
    last = int(kept[-1]["index"])
    # Published after the watcher's last look, on the leader that is about to die (stored:
    # a look from 0 shows it).
    assert agora("cluster", "weight", "web", "3", "--master", masters.url).returncode == 0
    eventually(
        lambda: any(e["detail"].get("weight") == "3.0" for e in events(0)),
        timeout=30,
        message="the last weight stored",
    )
    masters.masters[first].kill()  # kill -9
    second = masters.leader_index()
    assert second != first

    resumed = eventually(
        lambda: (e := events(last)) and any(x["kind"] == "MASTER_LEADING" for x in e) and e,
        timeout=30,
        message="the new leader's events",
    )
    assert not any(e["kind"] == "HISTORY_LOST" for e in resumed), resumed
    after = [e for e in resumed if e["topic"] != "stream"]
    indices = [int(e["index"]) for e in after]
    assert indices == list(range(last + 1, last + 1 + len(indices))), "no gap, no duplicate"
    weights = [e for e in after if e["kind"] == "SET_WEIGHT"]
    assert weights and weights[0]["detail"].get("weight") == "3.0", after
    leading = [e for e in after if e["kind"] == "MASTER_LEADING"]
    assert leading[-1]["detail"]["address"] == masters.addresses[second]
    # The whole history, asked afresh, is one numbering across both leaders.
    everything = [int(e["index"]) for e in events(0) if e["topic"] != "stream"]
    assert everything == sorted(set(everything)) and everything[-1] >= indices[-1]
