"""The planner's shortcut (placement._Most): a task that no agent has room for is known to fit
nowhere without walking the round's agents. It must never change a plan: the same rounds
planned with and without it place the same tasks on the same agents and give the same
reasons for what waits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from agora.common import Resources
from agora.frameworks.batch import placement
from agora.frameworks.batch.placement import Group, Want, plan
from agora.frameworks.sdk import TaskSpec
from agora.v1 import common_pb2 as C

agents = hs.lists(
    hs.tuples(hs.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), hs.integers(64, 4096)),
    min_size=1,
    max_size=12,
)
jobs = hs.lists(
    hs.tuples(
        hs.integers(1, 6),
        hs.sampled_from([0.25, 0.5, 1.0, 2.0]),
        hs.integers(32, 2048),
        hs.booleans(),  # a gang: all its tasks or none, the round rolled back
    ),
    min_size=1,
    max_size=8,
)


def _offer(agent: str, cpus: float, mem: int) -> C.Offer:
    resources = Resources.parse(f"cpus:{cpus};mem:{mem}")
    return C.Offer(offer_id=f"o-{agent}", agent_id=agent, resources=resources.to_proto())


def _groups(shapes) -> list[Group]:
    def wants(job: str, count: int, cpus: float, mem: int):
        for i in range(count):
            yield Want(job, i, TaskSpec(f"{job}-{i}", cpus=cpus, mem=mem, command="true"))

    return [
        Group(f"j{n}", wants(f"j{n}", count, cpus, mem), gang=gang)
        for n, (count, cpus, mem, gang) in enumerate(shapes)
    ]


def _outcome(result) -> tuple:
    placed = sorted((a.agent_id, w.job_id, w.index) for a in result.launches for w in a.wants)
    return (
        placed,
        result.waiting,
        sorted(result.behind),
        result.placed,
        result.constrained,
        sorted(result.owner_share),
        sorted(o.offer_id for o in result.unused),
    )


@settings(max_examples=150, deadline=None)
@given(agents, jobs)
def test_the_room_bound_never_changes_a_plan(sizes, shapes):
    offers = [_offer(f"a{i}", cpus, mem) for i, (cpus, mem) in enumerate(sizes)]
    with_bound = _outcome(plan(offers, _groups(shapes)))
    original = placement._Most.may_fit
    placement._Most.may_fit = lambda self, spec: True  # type: ignore[method-assign]
    try:
        walked = _outcome(plan(offers, _groups(shapes)))
    finally:
        placement._Most.may_fit = original  # type: ignore[method-assign]
    assert with_bound == walked


def test_agents_with_cpus_and_agents_with_mem_do_not_add_up_to_room():
    """One agent has the cpus, another the mem: a task needing both fits nowhere, and the
    bound says so (no agent is tried)."""
    offers = [_offer("cpu-rich", 4.0, 128), _offer("mem-rich", 0.25, 4096)]
    round_ = placement._Round(offers, "*", None)
    spec = TaskSpec("t", cpus=1.0, mem=1024, command="true")
    assert not round_.room.may_fit(spec)
    assert round_.room.may_fit(TaskSpec("t", cpus=0.25, mem=1024, command="true"))
    result = plan(offers, _groups([(1, 1.0, 1024, False)]))
    assert result.placed == 0 and result.waiting == ["j0"]
