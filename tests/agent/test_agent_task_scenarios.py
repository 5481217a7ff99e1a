"""The task manager's scenarios on the agent's harness: no process, a paused clock.

Each test drives a TaskManager through a fake launcher (tests/agent/agent_harness.py) and reads
the status updates it emits; the end-to-end tests prove the same paths with real wrappers.
"""

from __future__ import annotations

import signal

import pytest
from agent_harness import AgentHarness, task

from agora.agent.task_manager import MAX_KILL_GRACE
from agora.v1 import common_pb2


@pytest.fixture
async def agent(tmp_path):
    harness = AgentHarness(tmp_path)
    yield harness
    await harness.stop()


async def test_a_task_that_exits_zero_finishes(agent):
    wrapper = await agent.run(task("t1", "true"))
    assert agent.states("t1") == ["STARTING", "RUNNING"]
    assert agent.launcher.launched[0].argv == ("true",)
    wrapper.exit(0)
    await agent.clock.advance(0)
    assert agent.states("t1") == ["STARTING", "RUNNING", "FINISHED"]
    assert agent.last("t1").exit_code == 0


async def test_a_command_that_cannot_start_is_an_error_and_never_runs(agent):
    agent.host.refuse["/no/such"] = "cannot run '/no/such': command not found"
    agent.manager.run_task(agent.framework_id, task("t1", "/no/such"))
    await agent.clock.advance(0)
    assert agent.states("t1") == ["STARTING", "ERROR"]
    assert agent.last("t1").reason == "REASON_CONTAINER_LAUNCH_FAILED"
    assert "command not found" in agent.last("t1").message


async def test_a_kill_sends_sigterm_and_the_task_ends_killed(agent):
    wrapper = await agent.run(task("t1"))
    agent.manager.kill_task(agent.framework_id, "t1")
    await agent.clock.advance(0)
    assert wrapper.signals == [signal.SIGTERM]
    assert agent.states("t1") == ["STARTING", "RUNNING", "KILLED"]
    assert agent.last("t1").reason == "REASON_TASK_KILLED"
    assert agent.clock.sleeping() == 0, "no SIGKILL left waiting for a task that is gone"


async def test_a_task_ignoring_sigterm_is_killed_when_its_grace_period_ends(agent):
    agent.host.ignoring_sigterm.add("stubborn")
    wrapper = await agent.run(task("t1", "stubborn", grace=5))
    agent.manager.kill_task(agent.framework_id, "t1")
    await agent.clock.advance(4.9)
    assert wrapper.signals == [signal.SIGTERM] and wrapper.alive()
    assert agent.states("t1") == ["STARTING", "RUNNING"]
    await agent.clock.advance(0.2)
    assert wrapper.signals == [signal.SIGTERM, signal.SIGKILL]
    assert agent.states("t1") == ["STARTING", "RUNNING", "KILLED"]


async def test_no_grace_period_outlasts_the_agents_cap(agent):
    agent.host.ignoring_sigterm.add("stubborn")
    wrapper = await agent.run(task("t1", "stubborn", grace=10 * MAX_KILL_GRACE))
    agent.manager.kill_task(agent.framework_id, "t1")
    await agent.clock.advance(MAX_KILL_GRACE - 1)
    assert wrapper.alive()
    await agent.clock.advance(1)
    assert not wrapper.alive()
    assert agent.states("t1")[-1] == "KILLED"


async def test_a_task_killed_for_a_limit_fails_and_says_which(agent):
    await agent.run(task("t1"))
    run = agent.manager.find(agent.framework_id, "t1")
    assert run is not None
    agent.manager.kill_for_limit(
        run, "REASON_CONTAINER_LIMITATION_DISK", "disk limit of 1 MB exceeded"
    )
    await agent.clock.advance(0)
    last = agent.last("t1")
    assert (last.state, last.reason) == (
        common_pb2.TASK_FAILED,
        "REASON_CONTAINER_LIMITATION_DISK",
    )


async def test_a_restarted_agent_reattaches_to_running_tasks_and_learns_how_others_ended(agent):
    running = await agent.run(task("runs-on"))
    ends = await agent.run(task("ends-meanwhile"))
    agent.acknowledge_all()
    await agent.manager.stop()
    ends.exit(3)  # while no agent watches
    await agent.restart()
    # The one that ended gets its terminal update from its exit file; the other one is
    # running still, and is not reported again.
    assert agent.states("ends-meanwhile") == ["STARTING", "RUNNING", "FAILED"]
    assert agent.last("ends-meanwhile").exit_code == 3
    assert agent.states("runs-on") == ["STARTING", "RUNNING"]
    # The re-attached task is watched and killed like any other.
    agent.manager.kill_task(agent.framework_id, "runs-on")
    await agent.clock.advance(0)
    assert running.signals == [signal.SIGTERM]
    assert agent.states("runs-on") == ["STARTING", "RUNNING", "KILLED"]


async def test_a_task_whose_wrapper_never_started_is_failed_after_a_restart(agent):
    agent.manager.run_task(agent.framework_id, task("t1"))
    # The agent stops before the launch went anywhere: the record says STARTING, no wrapper.
    await agent.manager.stop()
    agent.host.wrappers.clear()
    await agent.restart()
    last = agent.last("t1")
    assert (last.state, last.reason) == (common_pb2.TASK_FAILED, "REASON_AGENT_RESTARTED")


async def test_a_completed_sandbox_is_due_for_gc_only_after_the_delay(agent):
    wrapper = await agent.run(task("t1", "true"))
    wrapper.exit(0)
    await agent.clock.advance(0)
    run = agent.manager.find(agent.framework_id, "t1")
    assert run is not None
    # Not before the master acknowledged the terminal update: a framework may still read it.
    assert agent.manager.sandboxes_due(agent.clock.time() + 7200, 3600) == []
    agent.acknowledge_all()
    await agent.clock.advance(3599)
    assert agent.manager.sandboxes_due(agent.clock.time(), 3600) == []
    await agent.clock.advance(1)
    assert agent.manager.sandboxes_due(agent.clock.time(), 3600) == [run.sandbox]
    # Taken off the queue: handed out once.
    assert agent.manager.sandboxes_due(agent.clock.time(), 3600) == []


async def test_a_kill_that_comes_while_the_wrapper_starts_takes_effect_once_it_runs(agent):
    agent.host.launches_go.clear()
    agent.manager.run_task(agent.framework_id, task("t1"))
    await agent.clock.advance(0)
    agent.manager.kill_task(agent.framework_id, "t1")
    assert agent.states("t1") == ["STARTING"]
    agent.host.launches_go.set()
    await agent.clock.advance(0)
    wrapper = agent.host.wrappers[agent.manager.runs()[0].record.run_id]
    assert wrapper.signals == [signal.SIGTERM]
    assert agent.states("t1") == ["STARTING", "RUNNING", "KILLED"]


async def test_an_agent_removed_by_the_master_kills_its_tasks_without_a_word(agent):
    """Shutdown: the master already holds the tasks LOST, so no update follows the kill."""
    wrappers = [await agent.run(task(f"t{i}")) for i in range(3)]
    before = len(agent.updates)
    await agent.manager.kill_all(forget=True)
    assert all(not w.alive() for w in wrappers)
    assert len(agent.updates) == before
    assert agent.manager.active_runs() == []
