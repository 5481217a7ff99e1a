"""Decline filters with Mesos' meaning: a filter hides an agent's offer from a framework only
while what would be offered is contained in what the framework refused.

The scene of every test: one agent of 1 cpu and 1024 MB, a framework whose tasks of 0.1 cpu and
32 MB have taken all its CPUs, so that what is left to offer is memory only. The framework
declines that leftover with a long filter; then a task ends.
"""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.master.allocator import Allocator, AllocatorConfig, OfferGrant

AGENT = Resources.of(cpus=1, mem=1024)
TASK = Resources.of(cpus=0.1, mem=32)
TEN_TASKS = Resources.of(cpus=1, mem=320)
LEFTOVER = Resources.of(mem=704)  # AGENT - TEN_TASKS: memory only


def full_agent(**config) -> Allocator:
    """f1 runs ten tasks on a1 and has just declined the memory left, with a 60 s filter."""
    alloc = Allocator(AllocatorConfig(**config))
    alloc.add_agent("a1", AGENT, allocated={"f1": TEN_TASKS})
    alloc.add_framework("f1")
    (offer,) = alloc.allocate(0.0)
    assert offer == OfferGrant("f1", "a1", LEFTOVER, exclusive=not config.get("optimistic_fanout"))
    if offer.exclusive:
        alloc.decline("f1", "a1", LEFTOVER, now=0.0, refuse_seconds=60.0)
    else:
        alloc.withdraw("f1", "a1", LEFTOVER)
        alloc.refuse("f1", "a1", LEFTOVER, 0.0, 60.0)
    return alloc


@pytest.mark.parametrize("fanout", [0, 2], ids=["pessimistic", "optimistic"])
def test_an_offer_of_the_refused_shape_stays_hidden(fanout):
    alloc = full_agent(optimistic_fanout=fanout)
    assert alloc.allocate(1.0) == []
    assert alloc.allocate(59.9) == []
    # The filter's time is up: the leftover is offered again.
    (again,) = alloc.allocate(60.0)
    assert (again.framework_id, again.resources) == ("f1", LEFTOVER)


@pytest.mark.parametrize("fanout", [0, 2], ids=["pessimistic", "optimistic"])
def test_the_cpus_a_finished_task_frees_are_offered_at_once(fanout):
    alloc = full_agent(optimistic_fanout=fanout)
    alloc.recover("f1", "a1", TASK, now=0.5)  # one task ends
    (offer,) = alloc.allocate(0.5)  # in the same allocation, not after the 60 s filter
    assert (offer.framework_id, offer.agent_id) == ("f1", "a1")
    assert offer.resources == LEFTOVER + TASK


def test_an_offer_smaller_than_what_was_refused_stays_hidden():
    alloc = full_agent()
    alloc.add_framework("f2")
    (other,) = alloc.allocate(1.0)  # f2 is not filtered: it is offered the leftover
    assert other == OfferGrant("f2", "a1", LEFTOVER)
    alloc.recover("f2", "a1", Resources.of(mem=300), now=1.0)  # f2 keeps 404 MB ...
    alloc.suppress("f2")
    assert alloc.allocate(2.0) == []  # ... and 300 MB are contained in the 704 f1 refused


def test_a_newer_decline_replaces_the_older_filter():
    alloc = full_agent()
    alloc.recover("f1", "a1", TASK, now=1.0)
    (offer,) = alloc.allocate(1.0)
    # f1 declines the larger offer for 5 s: its filter is now that offer, until t=6.
    alloc.decline("f1", "a1", offer.resources, now=1.0, refuse_seconds=5.0)
    assert alloc.allocate(5.9) == []
    (again,) = alloc.allocate(6.0)
    assert again.resources == LEFTOVER + TASK


def test_a_filter_follows_the_role_offer_with_a_reservation():
    # The agent reserves 0.5 cpu for f1's role: what f1 would be offered includes it.
    alloc = Allocator(AllocatorConfig())
    total = Resources.parse("cpus:1;mem:1024;cpus(batch):0.5")
    alloc.add_agent("a1", total)
    alloc.add_framework("f1", role="batch")
    (offer,) = alloc.allocate(0.0)
    assert offer.resources == total
    alloc.decline("f1", "a1", offer.resources, now=0.0, refuse_seconds=60.0)
    assert alloc.allocate(1.0) == []
    alloc.add_framework("f2")  # another role: offered only the unreserved part
    (other,) = alloc.allocate(1.0)
    assert (other.framework_id, other.resources) == ("f2", Resources.of(cpus=1, mem=1024))


def test_holds_are_not_filtered_by_their_frameworks_declines():
    # A framework declines an offer too small for its gang, then asks for a hold of the
    # gang's shape: the hold collects at once, as after a Revive.
    alloc = full_agent()
    alloc.add_agent("a2", AGENT)
    (offer,) = alloc.allocate(0.0)
    assert offer.agent_id == "a2"
    alloc.decline("f1", "a2", offer.resources, now=0.0, refuse_seconds=60.0)
    alloc.add_hold(
        "h1", "f1", count=2, size=Resources.of(cpus=0.5, mem=64), distinct=False, deadline=100.0
    )
    grants = alloc.allocate(1.0)
    assert [(g.agent_id, g.hold_id) for g in grants] == [("a2", "h1")]


def test_explain_names_only_the_filters_that_hide_an_offer():
    alloc = full_agent()
    reasons = alloc.explain("f1", 1.0)
    assert reasons[0].startswith("filtered on 1 agent(s) for 59.0 s more")
    alloc.recover("f1", "a1", TASK, now=1.0)  # a task ends: the filter hides nothing now
    reasons = alloc.explain("f1", 1.0)
    assert not any(r.startswith("filtered") for r in reasons), reasons
    assert reasons[-1].startswith("not blocked: 1 agent(s) have free resources for it")


def test_expiring_filters_names_the_agents_where_one_ended():
    alloc = full_agent()
    alloc.add_agent("a2", AGENT)
    (offer,) = alloc.allocate(0.0)
    alloc.decline("f1", "a2", offer.resources, now=0.0, refuse_seconds=5.0)
    assert alloc.expire_filters(4.9) == []
    assert alloc.expire_filters(5.0) == ["a2"]  # the master's next cycle visits a2 alone
    assert alloc.expire_filters(60.0) == ["a1"]
    assert alloc.next_wakeup() is None
