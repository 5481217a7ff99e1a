"""The master's books over random walks of its state machine: what the allocator holds on each
agent is always exactly the outstanding offers plus the live tasks there, and with the free part
that is the agent's total ("offered + used + free = total"), whatever order agents register,
re-register, disconnect and are removed, and frameworks subscribe, fail over, launch, decline,
kill and are torn down in. MasterCore is driven directly (no gRPC) with an injected clock."""

from __future__ import annotations

import random

import pytest

from agora.common import EMPTY, Resources, new_uuid
from agora.master.clock import ManualClock
from agora.master.config import MasterConfig
from agora.master.core import MasterCore
from agora.master.errors import CallError
from agora.master.registry import RECOVERING, Session
from agora.master.server import build_allocator
from agora.master.state_store import StateStore
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

Msg = agent_link_pb2.AgentMessage
TASK_SHAPES = ["cpus:1;mem:100", "cpus:0.5;mem:10;ports:[31000-31000]", "cpus:9"]


def check_books(core: MasterCore) -> None:
    for agent_id, agent in core.reg.agents.items():
        if agent.state == RECOVERING:
            continue
        offered = sum((o.resources for o in core.reg.offers_of_agent(agent_id)), EMPTY)
        used = sum((t.resources for t in core.reg.tasks_of_agent(agent_id)), EMPTY)
        held = sum(core.allocator.agent_allocations(agent_id).values(), EMPTY)
        assert held == offered + used, agent_id
        assert core.allocator.free(agent_id) + held == agent.total, agent_id


class Walk:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = ManualClock()
        config = MasterConfig(port=0, heartbeat_interval_seconds=1, agent_timeout_seconds=5)
        self.core = MasterCore(config, build_allocator(config), StateStore(None), clock=self.clock)
        self.agents: dict[str, tuple] = {}  # agent_id -> (Agent, Session) of its latest stream
        self.frameworks: dict[str, tuple] = {}
        self.launched = 0

    def step(self) -> None:
        core, rng = self.core, self.rng
        op = rng.choice(
            [
                "register",
                "register",
                "subscribe",
                "subscribe",
                "accept",
                "accept",
                "accept",
                "decline",
                "update",
                "update",
                "kill",
                "agent_gone",
                "framework_gone",
                "remove",
                "teardown",
                "allocate",
                "allocate",
            ]
        )
        try:
            getattr(self, op)(core, rng)
        except CallError:
            pass  # refused calls must leave the books as they were: checked below

    def register(self, core, rng) -> None:
        # A new agent, a known one re-registering, now and then a removed one (shut down).
        removed = list(core.reg.removed_agents)
        agent_id = rng.choice([*core.reg.agents, "", ""])
        if removed and rng.random() < 0.1:
            agent_id = rng.choice(removed)
        tasks = [
            agent_link_pb2.RunningTask(
                framework_id=t.framework_id,
                task=t.info,
                state=rng.choice([common_pb2.TASK_RUNNING, common_pb2.TASK_FINISHED]),
            )
            for t in core.reg.tasks_of_agent(agent_id)
            if rng.random() < 0.7
        ]
        info = common_pb2.AgentInfo(
            agent_id=agent_id,
            hostname="h",
            resources=Resources.parse("cpus:4;mem:1024;ports:[31000-31010]").to_proto(),
        )
        session = Session()
        agent = core.agents.register(Msg.Register(info=info, tasks=tasks), session)
        if agent is not None:
            self.agents[agent.agent_id] = (agent, session)

    def subscribe(self, core, rng) -> None:
        # A live framework fails over, or a new one comes (torn-down ids are refused).
        framework_id = rng.choice([*core.reg.frameworks, ""])
        framework, session = core.frameworks.subscribe(
            common_pb2.FrameworkInfo(
                framework_id=framework_id, name="f", failover_timeout_seconds=100
            )
        )
        self.frameworks[framework.framework_id] = (framework, session)

    def _offer(self, core, rng):
        return rng.choice(list(core.reg.offers.values())) if core.reg.offers else None

    def accept(self, core, rng) -> None:
        offer = self._offer(core, rng)
        if offer is None:
            return
        framework = core.reg.frameworks[offer.framework_id]
        tasks = []
        for _ in range(rng.randint(0, 2)):
            self.launched += 1
            tasks.append(
                common_pb2.TaskInfo(
                    task_id=f"t{self.launched}",
                    command=common_pb2.CommandInfo(shell="true"),
                    resources=Resources.parse(rng.choice(TASK_SHAPES)).to_proto(),
                )
            )
        core.tasks.accept(
            scheduler_pb2.AcceptRequest(
                framework_id=framework.framework_id,
                stream_id=framework.stream_id,
                offer_ids=[offer.offer_id],
                operations=[
                    scheduler_pb2.Operation(launch=scheduler_pb2.Operation.Launch(task_infos=tasks))
                ],
            )
        )

    def decline(self, core, rng) -> None:
        offer = self._offer(core, rng)
        if offer is not None:
            framework = core.reg.frameworks[offer.framework_id]
            core.offers.decline(
                scheduler_pb2.DeclineRequest(
                    framework_id=framework.framework_id,
                    stream_id=framework.stream_id,
                    offer_ids=[offer.offer_id],
                )
            )

    def _task(self, core, rng):
        return rng.choice(list(core.reg.tasks.values())) if core.reg.tasks else None

    def update(self, core, rng) -> None:
        task = self._task(core, rng)
        agent = core.reg.agents.get(task.agent_id) if task else None
        if agent is not None and agent.connected:
            state = rng.choice(
                [common_pb2.TASK_RUNNING, common_pb2.TASK_FINISHED, common_pb2.TASK_FAILED]
            )
            core.tasks.status_update(
                agent,
                Msg.StatusUpdate(
                    framework_id=task.framework_id,
                    status=common_pb2.TaskStatus(
                        task_id=task.task_id, state=state, uuid=new_uuid()
                    ),
                ),
            )

    def kill(self, core, rng) -> None:
        task = self._task(core, rng)
        framework = core.reg.frameworks.get(task.framework_id) if task else None
        if framework is not None and framework.connected:
            core.tasks.kill(
                scheduler_pb2.KillRequest(
                    framework_id=framework.framework_id,
                    stream_id=framework.stream_id,
                    task_id=task.task_id,
                )
            )

    def agent_gone(self, core, rng) -> None:
        if self.agents:
            core.agents.disconnected(*self.agents[rng.choice(list(self.agents))])

    def framework_gone(self, core, rng) -> None:
        if self.frameworks:
            core.frameworks.disconnected(*self.frameworks[rng.choice(list(self.frameworks))])

    def remove(self, core, rng) -> None:
        if core.reg.agents:
            core.agents.remove(rng.choice(list(core.reg.agents.values())), "walk")

    def teardown(self, core, rng) -> None:
        if core.reg.frameworks:
            core.frameworks.teardown(rng.choice(list(core.reg.frameworks.values())), "walk")

    def allocate(self, core, rng) -> None:
        self.clock.advance(rng.choice([0.0, 1.0, 6.0]))  # 6 s: past the default decline filter
        core.offers.allocate(core.offers.take_changed() if rng.random() < 0.5 else None)


@pytest.mark.parametrize("seed", range(20))
async def test_offers_plus_tasks_are_what_the_allocator_holds_on_every_agent(seed):
    walk = Walk(seed)
    for _ in range(300):
        walk.step()
        check_books(walk.core)
    walk.core.store.close()
    assert walk.launched > 0  # the walk did reach launches, or it proves little
