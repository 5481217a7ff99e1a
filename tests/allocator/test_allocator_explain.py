"""explain(): why a framework gets no offers right now, each reason as an operator reads it."""

from __future__ import annotations

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig

AGENT = Resources.of(cpus=4, mem=1024)


def cluster(agents: int = 2) -> Allocator:
    alloc = Allocator(AllocatorConfig())
    for i in range(agents):
        alloc.add_agent(f"a{i}", AGENT)
    return alloc


def test_unknown_framework():
    assert cluster().explain("nope", 0.0) == ["unknown framework nope: it is not subscribed"]


def test_suppressed():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.suppress("f1")
    assert alloc.explain("f1", 0.0)[0].startswith("suppressed")


def test_inactive():
    alloc = cluster()
    alloc.add_framework("f1")
    alloc.deactivate_framework("f1")
    assert alloc.explain("f1", 0.0)[0].startswith("inactive")


def test_filtered_on_n_agents_until_t_and_expiry_by_the_clock():
    alloc = cluster(agents=3)
    alloc.add_framework("f1")
    grants = alloc.allocate(10.0)
    for g, refuse in zip(grants[:2], (5.0, 30.0), strict=True):
        alloc.recover("f1", g.agent_id, g.resources, now=10.0, refuse_seconds=refuse)
    reasons = alloc.explain("f1", 11.0)
    assert any(r.startswith("filtered on 2 agent(s) for 4.0-29.0 s more") for r in reasons)
    reasons = alloc.explain("f1", 20.0)  # the 5 s filter has expired by now
    assert any(r.startswith("filtered on 1 agent(s) for 20.0 s more") for r in reasons)
    assert not any(r.startswith("filtered") for r in alloc.explain("f1", 40.0))


def test_role_at_quota_limit():
    alloc = cluster()
    alloc.set_quota("dev", None, Resources.of(cpus=4))
    alloc.add_framework("d1", role="dev")
    alloc.allocate(0.0)
    reasons = alloc.explain("d1", 0.0)
    assert "role dev at quota limit (cpus 4/4)" in reasons


def test_nothing_free_fits_the_minimum():
    alloc = cluster(agents=1)
    alloc.add_framework("f1")
    (g,) = alloc.allocate(0.0)
    alloc.recover("f1", "a0", Resources.of(cpus=0.005, mem=16), now=0.0)  # a scrap comes back
    (reason,) = alloc.explain("f1", 0.0)
    assert reason.startswith("nothing free fits the minimum allocatable (cpus:0.01 | mem:32)")
    assert "it holds resources on 1 agent(s)" in reason


def test_waiting_behind_frameworks_with_lower_shares():
    alloc = cluster(agents=1)
    alloc.add_framework("big")
    alloc.add_framework("small")
    alloc.add_agent(
        "x",
        Resources.of(cpus=4, mem=1024),
        allocated={"big": Resources.of(cpus=2), "small": Resources.of(cpus=1)},
    )
    # shares: small = 1/8, big = 2/8 -> big waits behind small for a0's free resources
    (reason,) = alloc.explain("big", 0.0)
    assert reason.startswith("waiting behind 1 framework(s) with lower shares")
    (reason,) = alloc.explain("small", 0.0)
    assert reason.startswith("not blocked")


def test_reasons_add_up():
    alloc = cluster()
    alloc.add_framework("f1")
    grants = alloc.allocate(0.0)
    for g in grants:
        alloc.recover("f1", g.agent_id, g.resources, now=0.0, refuse_seconds=60.0)
    alloc.suppress("f1")
    reasons = alloc.explain("f1", 1.0)
    assert reasons[0].startswith("suppressed")
    assert reasons[1].startswith("filtered on 2 agent(s)")
    assert len(reasons) == 2  # every free agent is filtered: nothing more to say
    alloc.add_agent("a9", Resources.of(cpus=0.001))
    assert alloc.explain("f1", 1.0)[2].startswith("nothing free fits the minimum")


def test_explain_reads_the_allocator_only_through_its_read_only_view():
    # explain.py names no private member of the allocator: it can change how it keeps its state.
    import ast
    from pathlib import Path

    import agora.master.allocator.explain as module

    tree = ast.parse(Path(module.__file__).read_text())
    private = sorted(
        {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "alloc"
            and node.attr.startswith("_")
        }
    )
    assert private == []


def test_the_allocator_satisfies_the_protocol_the_master_is_typed_against():
    from agora.master.allocator import Allocator, AllocatorConfig, AllocatorProtocol

    allocator: AllocatorProtocol = Allocator(AllocatorConfig())
    for name in AllocatorProtocol.__dict__:
        if not name.startswith("_"):
            assert callable(getattr(allocator, name)), name


def test_a_full_cluster_is_said_and_filters_that_hide_nothing_are_not():
    alloc = Allocator(AllocatorConfig())
    alloc.add_framework("busy")
    alloc.add_framework("idle")
    alloc.add_agent("a0", AGENT, allocated={"busy": AGENT})  # busy holds a0 whole
    alloc.add_agent("a1", Resources.of(cpus=1, mem=256))
    (g,) = alloc.allocate(0.0)  # idle's share is the lowest: a1 is offered to it ...
    assert (g.framework_id, g.agent_id) == ("idle", "a1")
    alloc.recover("idle", "a1", g.resources, now=0.0, refuse_seconds=60.0)  # ... it declines
    (g,) = alloc.allocate(0.0)
    assert (g.framework_id, g.agent_id) == ("busy", "a1")  # and busy takes it
    reasons = alloc.explain("idle", 1.0)
    # idle's filter on a1 still runs, but hides nothing: a1 has nothing free to hide.
    assert reasons == ["no free resources on any agent: all are offered or in use"]
