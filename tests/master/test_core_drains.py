"""Draining an agent for maintenance: frameworks told, nothing offered, a deadline kept."""

from __future__ import annotations

from core_harness import CoreHarness, task

from agora.common.task_states import REASON_AGENT_DRAINED
from agora.v1 import agent_link_pb2, common_pb2

AGENT = "cpus:4;mem:4096"


def _running(h: CoreHarness, framework, agent, task_id: str) -> None:
    [offer] = [o for o in framework.offers() if o.agent_id == agent.agent_id]
    framework.accept([offer.offer_id], [task(task_id, "cpus:1;mem:128")])
    agent.status(framework.framework_id, task_id, common_pb2.TASK_RUNNING)


def test_a_drain_tells_the_frameworks_there_and_kills_what_is_left_at_its_deadline():
    h = CoreHarness()
    agent = h.agent(AGENT)
    web = h.framework("web")
    _running(h, web, agent, "w1")
    idle = h.framework("idle")
    deadline, tasks = h.call(h.core.agents.drain, agent.agent_id, 60.0)
    assert tasks == 1 and deadline == h.clock.wall() + 60
    [told] = web.inbox.of("agent_drain")
    assert (told.agent_id, told.draining, told.deadline) == (agent.agent_id, True, deadline)
    assert not idle.inbox.of("agent_drain")  # nothing of its own runs there
    assert not idle.offers() and not web.offers()  # nothing more of it is offered
    h.advance(59)
    assert not agent.inbox.of("kill_task")  # the task runs on until the deadline
    h.advance(2)
    [kill] = agent.inbox.of("kill_task")
    assert (kill.task_id, kill.reason) == ("w1", REASON_AGENT_DRAINED)
    assert "deadline passed" in kill.message


def test_an_undrained_agent_kills_nothing_and_its_frameworks_hear_it_ended():
    h = CoreHarness()
    agent = h.agent(AGENT)
    web = h.framework("web")
    _running(h, web, agent, "w1")
    h.call(h.core.agents.drain, agent.agent_id, 30.0)
    h.call(h.core.agents.undrain, agent.agent_id)
    assert [d.draining for d in web.inbox.of("agent_drain")] == [True, False]
    h.advance(31)
    assert not agent.inbox.of("kill_task")
    assert web.offers()  # offered again


def test_draining_without_a_deadline_never_kills():
    h = CoreHarness()
    agent = h.agent(AGENT)
    web = h.framework("web")
    _running(h, web, agent, "w1")
    deadline, _ = h.call(h.core.agents.drain, agent.agent_id, 0.0)
    assert deadline == 0.0 and web.inbox.of("agent_drain")[0].deadline == 0.0
    h.advance(5)
    assert not agent.inbox.of("kill_task")


def test_a_drain_and_its_deadline_outlive_a_master_restart(tmp_path):
    h = CoreHarness(state_dir=tmp_path)
    agent = h.agent(AGENT)
    web = h.framework("web")
    _running(h, web, agent, "w1")
    deadline, _ = h.call(h.core.agents.drain, agent.agent_id, 60.0)
    h = h.restart()
    running = agent_link_pb2.RunningTask(
        framework_id=web.framework_id, task=task("w1"), state=common_pb2.TASK_RUNNING
    )
    back = h.agent(AGENT, connect=False)
    back.connect(tasks=[running], agent_id=agent.agent_id)
    again = h.framework("web", subscribe=False)
    again.subscribe(framework_id=web.framework_id)
    # The resubscribed framework hears of the drain, with the deadline set before the restart.
    [told] = again.inbox.of("agent_drain")
    assert (told.agent_id, told.draining, told.deadline) == (agent.agent_id, True, deadline)
    assert not again.offers()
    h.advance(61)
    [kill] = back.inbox.of("kill_task")
    assert (kill.task_id, kill.reason) == ("w1", REASON_AGENT_DRAINED)


def test_an_agent_back_after_its_drain_deadline_has_its_tasks_killed_at_once(tmp_path):
    h = CoreHarness(state_dir=tmp_path)
    agent = h.agent(AGENT)
    web = h.framework("web")
    _running(h, web, agent, "w1")
    h.call(h.core.agents.drain, agent.agent_id, 1.0)
    # The deadline is wall-clock time: it passes while the master is down.
    h = h.restart(down_for=2.0)
    running = agent_link_pb2.RunningTask(
        framework_id=web.framework_id, task=task("w1"), state=common_pb2.TASK_RUNNING
    )
    back = h.agent(AGENT, connect=False)
    back.connect(tasks=[running], agent_id=agent.agent_id)
    [kill] = back.inbox.of("kill_task")
    assert (kill.task_id, kill.reason) == ("w1", REASON_AGENT_DRAINED)
