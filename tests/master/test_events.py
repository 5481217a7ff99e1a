"""Issue 38, part 4: the operator event stream and the audit log. The event log's rules (resume,
HISTORY_LOST, topics, a watcher that stops reading) alone, then through a real master: a drain
seen as an event and in the audit log, a watcher resuming after its last index, and
`agora cluster events`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest
from master_harness import FakeAgent, operator, start_master

from agora.master import events as events_module
from agora.master.events import EventLog
from agora.v1 import operator_pb2


def kinds(events) -> list[str]:
    return [e.kind for e in events]


def test_a_watcher_resumes_after_its_last_index_and_hears_what_follows():
    log = EventLog(generation=7)
    a = log.publish("agent", "AGENT_ADDED", "agent-1")
    log.publish("agent", "AGENT_DRAINING", "agent-1")
    watcher, first = log.watch(a.index, ())
    assert kinds(first) == ["AGENT_DRAINING", "CAUGHT_UP"]
    log.publish("task", "TASK_RUNNING", "t1")
    assert watcher.queue.get_nowait().kind == "TASK_RUNNING"
    # From 0: everything kept, oldest first.
    _, everything = log.watch(0, ())
    assert kinds(everything) == ["AGENT_ADDED", "AGENT_DRAINING", "TASK_RUNNING", "CAUGHT_UP"]
    assert a.index >> 32 == 7 and [e.index for e in everything[:3]] == sorted(
        e.index for e in everything[:3]
    )


def test_another_leaders_index_or_one_older_than_the_history_says_history_lost(monkeypatch):
    monkeypatch.setattr(events_module, "HISTORY", 3)
    log = EventLog(generation=8)
    log.history = log.history.__class__(maxlen=3)
    old = EventLog(generation=7).publish("agent", "AGENT_ADDED", "a")
    log.publish("agent", "AGENT_ADDED", "b")
    _, first = log.watch(old.index, ())
    assert first[0].kind == "HISTORY_LOST" and "another master" in first[0].detail["reason"]
    assert kinds(first[1:]) == ["AGENT_ADDED", "CAUGHT_UP"]  # the new leader's, from its start
    early = log.last_index
    for i in range(5):
        log.publish("task", "TASK_RUNNING", f"t{i}")
    _, first = log.watch(early, ())
    assert first[0].kind == "HISTORY_LOST" and "older than" in first[0].detail["reason"]


class FakeStore:
    """Stands for master/event_store.ZkEventStore: appends wait for `land` or `fail`."""

    def __init__(self, loaded=()) -> None:
        self.loaded = list(loaded)
        self.sent: list[tuple[list, object]] = []
        self.seq = 0

    def append(self, rows, done) -> None:
        self.sent.append((rows, done))

    def land(self) -> None:
        rows, done = self.sent.pop(0)
        self.seq += 1
        done(self.seq, None)

    def fail(self, error: Exception) -> None:
        rows, done = self.sent.pop(0)
        done(None, error)

    def landed(self, seq, count, keep) -> None:
        pass


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_sets_events_reach_watchers_only_once_stored_in_order_across_a_retry(
    monkeypatch,
):
    monkeypatch.setattr(events_module, "RETRY_SECONDS", 0.01)
    # A new leader numbers on from what its predecessor stored.
    store = FakeStore(loaded=[(41, 1.0, "agent", "AGENT_ADDED", "a", "", {})])
    log = EventLog(generation=9, store=store)
    assert log.last_index == 41 and log.generation == 0
    watcher, first = log.watch(41, ())
    assert kinds(first) == ["CAUGHT_UP"]
    log.publish("task", "TASK_RUNNING", "t1")
    log.publish("task", "TASK_FINISHED", "t1")  # waits: one batch at a time
    assert watcher.queue.empty() and len(store.sent) == 1
    store.fail(ConnectionError("ZooKeeper away"))
    await settle()
    assert watcher.queue.empty(), "nothing reaches a watcher before it is stored"
    await asyncio.sleep(0.05)
    ((rows, _),) = store.sent
    assert [r[0] for r in rows] == [42, 43], "the failed batch again, with what followed"
    store.land()
    await settle()
    got = [watcher.queue.get_nowait() for _ in range(2)]
    assert [(e.index, e.kind) for e in got] == [(42, "TASK_RUNNING"), (43, "TASK_FINISHED")]
    assert log.last_index == 43


async def test_a_batch_too_large_for_one_entry_goes_in_halves_in_order():
    class Small(FakeStore):
        def append(self, rows, done) -> None:
            if len(rows) > 2:
                raise ValueError("too large")
            super().append(rows, done)

    store = Small()
    log = EventLog(store=store)
    watcher, _ = log.watch(0, ())
    store.sent.append(([], lambda seq, error: None))  # something in flight: the rest waits
    log._sending = []
    for i in range(5):
        log.publish("task", "TASK_RUNNING", f"t{i}")
    store.sent.clear()
    log._sending = None
    log._send()
    while store.sent:
        store.land()
        await settle()
    got = [watcher.queue.get_nowait().subject for _ in range(5)]
    assert got == [f"t{i}" for i in range(5)]


def test_a_batch_stored_twice_after_a_lost_answer_is_loaded_once():
    rows = [(1, 1.0, "agent", "A", "a", "", {}), (2, 1.0, "agent", "B", "b", "", {})]
    log = EventLog(store=FakeStore(loaded=[*rows, *rows[1:], (3, 1.0, "agent", "C", "c", "", {})]))
    assert [e.index for e in log.history] == [1, 2, 3] and log.last_index == 3


async def test_a_deposed_leaders_events_never_reach_a_watcher():
    from agora.common.zk_log import LogFenced

    store = FakeStore()
    log = EventLog(store=store)
    watcher, _ = log.watch(0, ())
    log.publish("task", "TASK_RUNNING", "t1")
    store.fail(LogFenced("lost the election znode"))
    await settle()
    log.publish("task", "TASK_RUNNING", "t2")
    assert watcher.queue.empty() and log.last_index == 0


def test_topics_filter_and_a_watcher_that_stops_reading_is_cut(monkeypatch):
    monkeypatch.setattr(events_module, "WATCHER_QUEUE", 2)
    log = EventLog()
    watcher, first = log.watch(0, ["agent"])
    assert kinds(first) == ["CAUGHT_UP"]
    log.publish("task", "TASK_RUNNING", "t1")  # not its topic
    for i in range(3):
        log.publish("agent", "AGENT_ADDED", f"a{i}")
    got = [watcher.queue.get_nowait() for _ in range(3)]
    assert kinds(got[:2]) == ["AGENT_ADDED", "AGENT_ADDED"] and got[2] is None and watcher.cut


def test_an_audited_change_is_one_json_line(tmp_path):
    path = tmp_path / "audit.log"
    log = EventLog(audit_path=path)
    log.audit("ops", "DRAIN_AGENT", "agent-1", "ipv4:10.0.0.4:5555", "ok", deadline=600)
    log.audit("", "SET_WEIGHT", "analytics", "ipv4:10.0.0.9:1", "refused (PERMISSION_DENIED)")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(x["principal"], x["action"], x["target"], x["outcome"]) for x in lines] == [
        ("ops", "DRAIN_AGENT", "agent-1", "ok"),
        ("(anonymous)", "SET_WEIGHT", "analytics", "refused (PERMISSION_DENIED)"),
    ]
    assert lines[0]["peer"] == "ipv4:10.0.0.4:5555" and lines[0]["deadline"] == "600"
    assert kinds(log.history) == ["DRAIN_AGENT", "SET_WEIGHT"]


@pytest.fixture
async def master(tmp_path):
    m = await start_master(tmp_path / "state", audit_log_path=tmp_path / "audit.log")
    yield m
    await m.stop(0)


async def read_until(call, kind: str, timeout: float = 10.0):
    seen = []
    async with asyncio.timeout(timeout):
        async for event in call:
            seen.append(event)
            if event.kind == kind:
                return seen
    raise AssertionError(f"no {kind}: {kinds(seen)}")


async def test_a_drain_is_an_event_and_an_audit_line_and_a_watcher_resumes(master, tmp_path):
    agent = FakeAgent(master.address)
    await agent.connect()
    channel, ops = operator(master.address)
    async with channel:
        watch = ops.WatchEvents(operator_pb2.WatchEventsRequest())
        history = await read_until(watch, "CAUGHT_UP")
        assert ["MASTER_LEADING", "AGENT_ADDED"] == kinds(history)[:2]
        await ops.DrainAgent(operator_pb2.DrainAgentRequest(agent_id=agent.agent_id))
        seen = await read_until(watch, "DRAIN_AGENT")
        assert kinds(seen) == ["AGENT_DRAINING", "DRAIN_AGENT"]
        last = seen[-1].index
        watch.cancel()
        await ops.UndrainAgent(operator_pb2.UndrainAgentRequest(agent_id=agent.agent_id))
        # Back with the last index it saw: what it missed, and nothing twice.
        again = ops.WatchEvents(operator_pb2.WatchEventsRequest(since=last))
        missed = await read_until(again, "CAUGHT_UP")
        assert kinds(missed) == ["AGENT_UNDRAINED", "UNDRAIN_AGENT", "CAUGHT_UP"]
        again.cancel()
        with pytest.raises(grpc.aio.AioRpcError):
            await ops.DrainAgent(operator_pb2.DrainAgentRequest(agent_id="agent-nope"))
    await agent.close()
    lines = [json.loads(x) for x in (tmp_path / "audit.log").read_text().splitlines()]
    assert [(x["action"], x["target"], x["outcome"]) for x in lines] == [
        ("DRAIN_AGENT", agent.agent_id, "ok"),
        ("UNDRAIN_AGENT", agent.agent_id, "ok"),
        ("DRAIN_AGENT", "agent-nope", "refused (NOT_FOUND)"),
    ]
    assert all(x["peer"].startswith("ipv4:127.0.0.1:") for x in lines)


async def test_agora_cluster_events_prints_the_history_as_json(master):
    agent = FakeAgent(master.address)
    await agent.connect()
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agora.cli.main", "cluster", "events", "--json"]
        + ["--master", master.address, "--topic", "agent"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    await agent.close()
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["topic"], r["kind"], r["subject"]) for r in rows] == [
        ("agent", "AGENT_ADDED", agent.agent_id)
    ]
    assert rows[0]["detail"]["hostname"] == "host-a"
