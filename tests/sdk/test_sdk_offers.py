"""Offer helpers: TaskSpec, OfferPacker and fit() pick real resources so frameworks never do
resource arithmetic by hand."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agora.common import Resources
from agora.frameworks.sdk import OfferPacker, TaskSpec, fit, offer_resources
from agora.frameworks.sdk.testing import make_offer


def spec(name="t", cpus=0.5, mem=64, **kw):
    return TaskSpec(name, cpus=cpus, mem=mem, command=kw.pop("command", "true"), **kw)


def task_resources(task):
    return Resources.from_proto(task.resources)


def test_packs_as_many_tasks_as_fit_and_keeps_the_rest():
    offer = make_offer("o1", "agent-1", "cpus:2;mem:1000")
    packer = OfferPacker(offer)
    tasks = packer.pack_all([spec(f"t{i}", cpus=0.5, mem=200) for i in range(6)])
    # cpus run out first: 2 / 0.5 = 4 tasks, 800 MB used.
    assert len(tasks) == 4
    assert packer.remaining == Resources.of(mem=200)
    assert all(t.agent_id == "agent-1" for t in tasks)
    assert task_resources(tasks[0]) == Resources.of(cpus=0.5, mem=200)


def test_ports_are_concrete_and_never_shared():
    offer = make_offer("o1", "agent-1", "cpus:4;mem:4000;ports:[31000-31002,31010-31011]")
    packer = OfferPacker(offer)
    a = packer.pack(spec("a", ports=2))
    b = packer.pack(spec("b", ports=2))
    assert task_resources(a).port_ranges() == ((31000, 31001),)
    # b spans the end of one range and the start of the next.
    assert task_resources(b).port_ranges() == ((31002, 31002), (31010, 31010))
    assert packer.pack(spec("c", ports=2)) is None  # one port left
    assert packer.pack(spec("d", ports=1)) is not None


def test_reserved_resources_of_the_role_are_used_first_then_unreserved():
    offer = make_offer("o1", "agent-1", "cpus(analytics):1;cpus:4;mem:1000;mem(web):500")
    packer = OfferPacker(offer, role="analytics")
    task = packer.pack(spec(cpus=1.5, mem=100))
    used = task_resources(task)
    assert used.scalar("cpus", "analytics") == 1
    assert used.scalar("cpus", "*") == 0.5
    # Another role's reservation is never touched, even if offered by mistake.
    assert packer.remaining.scalar("mem", "web") == 0
    assert packer.pack(spec(cpus=0.1, mem=901)) is None


def test_a_task_needing_more_than_the_offer_does_not_fit():
    packer = OfferPacker(make_offer("o1", "agent-1", "cpus:1;mem:100"))
    assert not packer.fits(spec(cpus=1, mem=101))
    assert not packer.fits(spec(cpus=0.1, mem=10, gpus=1))
    assert packer.fits(spec(cpus=1, mem=100))
    assert packer.tasks == []


def test_task_info_carries_command_env_and_generated_unique_ids():
    s = TaskSpec(
        "web server",
        cpus=0.1,
        mem=32,
        command=["python3", "-m", "http.server"],
        env={"MODE": "demo"},
        labels={"app": "web"},
        kill_grace_period_seconds=5,
    )
    packer = OfferPacker(make_offer("o1", "agent-1", "cpus:1;mem:128"))
    first, second = packer.pack(s), packer.pack(s)
    assert first.task_id != second.task_id
    assert first.task_id.startswith("web-server-")
    assert list(first.command.argv) == ["python3", "-m", "http.server"]
    assert first.command.environment["MODE"] == "demo"
    assert first.labels["app"] == "web"
    assert first.kill_grace_period_seconds == 5
    given_id = OfferPacker(make_offer("o2", "agent-1", "cpus:1;mem:128")).pack(
        TaskSpec("x", cpus=0.1, mem=1, command="true", task_id="my-id")
    )
    assert given_id.task_id == "my-id"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cpus": -1}, "negative"),
        ({"mem": math.nan}, "finite"),
        ({"ports": 1.5}, "count"),
        ({"command": None}, "command"),
        ({"command": ""}, "empty"),
    ],
)
def test_bad_specs_are_refused_where_they_are_written(kwargs, message):
    args = {"name": "t", "cpus": 0.1, "mem": 10, "command": "true", **kwargs}
    with pytest.raises(ValueError, match=message):
        TaskSpec(**args)


def test_fit_merges_offers_of_one_agent_and_reports_unused_offers():
    offers = [
        make_offer("o1", "agent-1", "cpus:0.5;mem:100"),
        make_offer("o2", "agent-1", "cpus:0.5;mem:100"),
        make_offer("o3", "agent-2", "cpus:0.1;mem:10"),
    ]
    result = fit(offers, [spec(cpus=1, mem=150)])
    assert len(result.placements) == 1
    placement = result.placements[0]
    assert placement.agent_id == "agent-1"
    assert [o.offer_id for o in placement.offers] == ["o1", "o2"]
    assert [o.offer_id for o in result.unused] == ["o3"]
    assert result.unplaced == []


def test_fit_spreads_over_agents_with_a_cap_per_agent():
    offers = [make_offer(f"o{i}", f"agent-{i}", "cpus:4;mem:4096") for i in range(3)]
    specs = [spec(f"t{i}", cpus=0.1, mem=32) for i in range(10)]
    result = fit(offers, specs, max_per_agent=3, spread=True)
    assert [len(p.tasks) for p in result.placements] == [3, 3, 3]
    assert len(result.unplaced) == 1
    # Taking turns: the first three tasks go to three different agents.
    first_three = {
        p.agent_id for p in result.placements for s in p.specs if s.name in {"t0", "t1", "t2"}
    }
    assert first_three == {"agent-0", "agent-1", "agent-2"}


def test_fit_packs_tightly_by_default():
    offers = [make_offer(f"o{i}", f"agent-{i}", "cpus:1;mem:1024") for i in range(3)]
    result = fit(offers, [spec(f"t{i}", cpus=0.5, mem=32) for i in range(3)])
    assert [len(p.tasks) for p in result.placements] == [2, 1]
    assert [o.offer_id for o in result.unused] == ["o2"]


def lent(offer):
    """The offer, marked revocable (as the master marks lent resources)."""
    offer.revocable = True
    return offer


def test_fit_launches_on_revocable_offers_apart_and_on_ordinary_ones_first():
    # agent-1 has an ordinary and a revocable offer; agent-2 only a revocable one. The master
    # refuses an Accept mixing the two kinds, so each placement holds one kind only; ordinary
    # room is used before lent room, where a task may be stopped at any time. The lent
    # placements come first: an ordinary launch makes the master rescind what it lends there.
    offers = [
        lent(make_offer("lent-1", "agent-1", "cpus:2;mem:512")),
        make_offer("mine-1", "agent-1", "cpus:1;mem:512"),
        lent(make_offer("lent-2", "agent-2", "cpus:2;mem:512")),
    ]
    result = fit(offers, [spec(f"t{i}", cpus=1, mem=64) for i in range(4)])
    launches = [([o.offer_id for o in p.offers], len(p.tasks), p.revocable)
                for p in result.placements]  # fmt: skip
    assert launches == [(["lent-1"], 2, True), (["lent-2"], 1, True), (["mine-1"], 1, False)]
    assert result.unused == [] and result.unplaced == []
    for placement in result.placements:
        assert len({o.revocable for o in placement.offers}) == 1


def test_fit_caps_tasks_per_agent_over_both_kinds_of_offer():
    offers = [make_offer("mine", "agent-1", "cpus:1;mem:512"),
              lent(make_offer("lent", "agent-1", "cpus:4;mem:512"))]  # fmt: skip
    result = fit(offers, [spec(f"t{i}", cpus=0.5, mem=32) for i in range(5)], max_per_agent=3)
    assert [(p.revocable, len(p.tasks)) for p in result.placements] == [(True, 1), (False, 2)]
    assert len(result.unplaced) == 2


def test_a_packer_refuses_to_mix_revocable_and_ordinary_offers():
    offers = [make_offer("mine", "agent-1", "cpus:1;mem:512"),
              lent(make_offer("lent", "agent-1", "cpus:1;mem:512"))]  # fmt: skip
    with pytest.raises(ValueError, match="revocable and ordinary offers"):
        OfferPacker(offers)
    assert OfferPacker(offers[1:]).revocable and not OfferPacker(offers[:1]).revocable


def test_offer_resources_filters_by_role():
    offer = make_offer("o1", "a", "cpus:1;cpus(x):2;cpus(y):4")
    assert offer_resources(offer, "x").scalar("cpus") == 3
    assert offer_resources([offer]).scalar("cpus") == 1


# --- properties -----------------------------------------------------------------------------

roles = st.sampled_from(["*", "web"])


@st.composite
def offers_strategy(draw):
    offers = []
    for i in range(draw(st.integers(1, 4))):
        agent = f"agent-{draw(st.integers(0, 2))}"
        scalars = {}
        for name in ("cpus", "mem", "disk"):
            for role in ("*", "web", "other"):
                if draw(st.booleans()):
                    scalars[(name, role)] = draw(st.floats(0.001, 64, allow_nan=False)) * (
                        100 if name != "cpus" else 1
                    )
        ranges = {}
        # As on a real agent, a port is offered once: under one role, in one offer.
        for base, role in ((31000, "*"), (41000, "web")):
            begin = base + i * 200 + draw(st.integers(0, 100))
            if draw(st.booleans()):
                ranges[("ports", role)] = [(begin, begin + draw(st.integers(0, 8)))]
        offer = make_offer(f"o{i}", agent, Resources(scalars, ranges))
        offer.revocable = draw(st.booleans())
        offers.append(offer)
    return offers


task_specs = st.lists(
    st.builds(
        TaskSpec,
        name=st.just("t"),
        cpus=st.floats(0, 8, allow_nan=False),
        mem=st.floats(0, 2000, allow_nan=False),
        disk=st.floats(0, 500, allow_nan=False),
        ports=st.integers(0, 4),
        command=st.just("true"),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    offers=offers_strategy(),
    specs=task_specs,
    role=roles,
    cap=st.one_of(st.none(), st.integers(1, 4)),
    spread=st.booleans(),
)
def test_fit_never_exceeds_the_offers_nor_reuses_a_port(offers, specs, role, cap, spread):
    result = fit(offers, specs, role=role, max_per_agent=cap, spread=spread)
    assert len(specs) == sum(len(p.specs) for p in result.placements) + len(result.unplaced)
    per_agent: dict[str, int] = {}
    for placement in result.placements:
        # One kind of offer per launch: the master refuses revocable mixed with ordinary.
        assert len({o.revocable for o in placement.offers}) == 1
        per_agent[placement.agent_id] = per_agent.get(placement.agent_id, 0) + len(placement.tasks)
        available = offer_resources(placement.offers, role)
        used = Resources()
        ports: list[int] = []
        for task, s in zip(placement.tasks, placement.specs, strict=True):
            r = task_resources(task)
            used = used + r
            # Each task gets exactly what it asked for, no more, no less.
            for name in ("cpus", "mem", "disk"):
                assert math.isclose(r.scalar(name), round(getattr(s, name), 3), abs_tol=1e-6)
            task_ports = [p for b, e in r.port_ranges() for p in range(b, e + 1)]
            assert len(task_ports) == s.ports
            ports.extend(task_ports)
        assert available.contains(used)
        assert len(ports) == len(set(ports))
    if cap is not None:
        assert all(count <= cap for count in per_agent.values())
    placed_offer_ids = {o.offer_id for p in result.placements for o in p.offers}
    assert placed_offer_ids.isdisjoint(o.offer_id for o in result.unused)
    assert placed_offer_ids | {o.offer_id for o in result.unused} == {o.offer_id for o in offers}


def test_spreading_fills_ordinary_room_on_every_agent_before_lent_room():
    # Two agents, each with 2 ordinary cpus and 2 lent ones; 4 one-cpu tasks. Taking turns
    # across both kinds at once put t1 and t3 on lent room; each kind takes its own turns.
    offers = [
        make_offer("mine-1", "agent-1", "cpus:2;mem:512"),
        lent(make_offer("lent-1", "agent-1", "cpus:2;mem:512")),
        make_offer("mine-2", "agent-2", "cpus:2;mem:512"),
        lent(make_offer("lent-2", "agent-2", "cpus:2;mem:512")),
    ]
    result = fit(offers, [spec(f"t{i}", cpus=1, mem=64) for i in range(4)], spread=True)
    placed = {p.agent_id: [s.name for s in p.specs] for p in result.placements}
    assert placed == {"agent-1": ["t0", "t2"], "agent-2": ["t1", "t3"]}
    assert not any(p.revocable for p in result.placements)
    assert {o.offer_id for o in result.unused} == {"lent-1", "lent-2"}


def test_spreading_puts_what_ordinary_room_cannot_hold_on_lent_room_launched_first():
    offers = [
        make_offer("mine-1", "agent-1", "cpus:1;mem:512"),
        lent(make_offer("lent-1", "agent-1", "cpus:2;mem:512")),
        make_offer("mine-2", "agent-2", "cpus:1;mem:512"),
    ]
    result = fit(offers, [spec(f"t{i}", cpus=1, mem=64) for i in range(3)], spread=True)
    launches = [(p.agent_id, p.revocable, [s.name for s in p.specs]) for p in result.placements]
    # Lent room first in launch order: an ordinary launch on agent-1 rescinds lent-1.
    assert launches == [
        ("agent-1", True, ["t2"]),
        ("agent-1", False, ["t0"]),
        ("agent-2", False, ["t1"]),
    ]


@settings(max_examples=300, deadline=None)
@given(
    offers=offers_strategy(),
    specs=task_specs,
    role=roles,
    cap=st.one_of(st.none(), st.integers(1, 4)),
    spread=st.booleans(),
)
def test_nothing_goes_on_lent_room_that_ordinary_room_could_hold(offers, specs, role, cap, spread):
    result = fit(offers, specs, role=role, max_per_agent=cap, spread=spread)
    per_agent: dict[str, int] = {}
    for placement in result.placements:
        per_agent[placement.agent_id] = per_agent.get(placement.agent_id, 0) + len(placement.tasks)
    # What each agent's ordinary offers have left once fit() is done. Room only shrinks and
    # counts only grow as fit() goes, so a spec that fits what is left at the end, on an agent
    # still under the cap, would have fitted there when it was put on lent room.
    ordinary_left = []
    for placement in result.placements:
        if placement.revocable:
            continue
        packer = OfferPacker(placement.offers, role)
        for task in placement.tasks:
            packer.remaining = packer.remaining - task_resources(task)
        ordinary_left.append(packer)
    agents_unused: dict[str, list] = {}
    for offer in result.unused:
        if not offer.revocable:
            agents_unused.setdefault(offer.agent_id, []).append(offer)
    ordinary_left.extend(OfferPacker(group, role) for group in agents_unused.values())
    open_left = [
        packer for packer in ordinary_left if cap is None or per_agent.get(packer.agent_id, 0) < cap
    ]
    for placement in result.placements:
        if placement.revocable:
            for s in placement.specs:
                assert not any(packer.fits(s) for packer in open_left), s
    # And the launch order still puts every lent placement before every ordinary one.
    kinds = [p.revocable for p in result.placements]
    assert kinds == sorted(kinds, reverse=True)
