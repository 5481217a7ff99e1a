"""Offers sized by demand through the master: Revive and Demand with `wants`, the offers that
answer it, launches taken off it, and a bad want refused."""

from __future__ import annotations

import grpc
import pytest
from core_harness import CoreHarness, task

from agora.common import Resources
from agora.master.errors import CallError
from agora.v1 import common_pb2, scheduler_pb2

ONE_TASK = Resources.parse("cpus:1;mem:128")


def wants(resources: Resources) -> scheduler_pb2.Wants:
    return scheduler_pb2.Wants(resources=resources.to_proto())


def decline_all(framework) -> None:
    offers = [o.offer_id for o in framework.offers()]
    if offers:
        framework.call("Decline", offer_ids=offers, filters=common_pb2.Filters(refuse_seconds=0))


@pytest.fixture
def h():
    h = CoreHarness()
    for i in range(5):
        h.agent(hostname=f"h{i}")
    return h


def test_without_wants_a_revive_offers_every_agent(h):
    framework = h.framework()
    assert len(framework.offers()) == 5


def test_a_revive_wanting_one_task_is_offered_one_agent_and_a_decline_brings_the_next(h):
    framework = h.framework()
    framework.call("Suppress")
    decline_all(framework)
    framework.call("Revive", wants=wants(ONE_TASK))
    [offer] = framework.offers()
    framework.call(
        "Decline", offer_ids=[offer.offer_id], filters=common_pb2.Filters(refuse_seconds=60)
    )
    [second] = framework.offers()  # another agent: the filter hides the declined one
    assert second.agent_id != offer.agent_id
    framework.accept([second.offer_id], [task("t1")])
    # The task used all that was wanted: no offer follows the Accept's leftover.
    assert framework.offers() == []
    # More work: a Demand with a new want brings offers again, filters kept.
    framework.call("Demand", wants=wants(Resources.parse("cpus:8;mem:256")))
    offered = framework.offers()
    assert len(offered) == 2 and offer.agent_id not in {o.agent_id for o in offered}


def test_other_frameworks_get_what_a_sated_one_leaves(h):
    small = h.framework("small")
    small.call("Suppress")
    decline_all(small)
    big = h.framework("big")
    assert len(big.offers()) == 5
    big.call("Suppress")
    decline_all(big)
    small.call("Revive", wants=wants(ONE_TASK))
    big.call("Revive")
    assert len(small.offers()) == 1 and len(big.offers()) == 4


def test_a_malformed_want_is_refused_and_changes_nothing(h):
    framework = h.framework()
    bad = scheduler_pb2.Wants(resources=[common_pb2.Resource(name="cpus", scalar=-1)])
    with pytest.raises(CallError) as e:
        framework.call("Revive", wants=bad)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "wants:" in e.value.message and "in total" in e.value.message
    assert h.core.allocator.wants_of(framework.framework_id) is None


def test_a_new_subscription_drops_the_want(h):
    framework = h.framework()
    framework.call("Revive", wants=wants(ONE_TASK))
    framework.subscribe()  # failover: its offers went with the old stream
    assert h.core.allocator.wants_of(framework.framework_id) is None
    assert len(framework.offers()) == 5


def test_a_plain_revive_lifts_the_limit(h):
    framework = h.framework()
    framework.call("Suppress")
    decline_all(framework)
    framework.call("Revive", wants=wants(ONE_TASK))
    assert len(framework.offers()) == 1
    framework.call("Revive")
    assert len(framework.offers()) == 5


def test_a_grant_never_sent_covers_nothing(h):
    # An agent's stream closes (say its send queue overflowed) and a cycle runs before the
    # master has noticed: the grant there is taken back unsent. It must not count as an offer
    # the framework holds, or a framework that wanted one task would be offered nothing more.
    framework = h.framework()
    framework.call("Suppress")
    decline_all(framework)
    for agent in h.core.reg.agents.values():
        agent.session.close()
    framework.call("Revive", wants=wants(ONE_TASK))
    assert framework.offers() == []
    wanted, out, _ = h.core.allocator.wants_of(framework.framework_id)
    assert wanted == {"cpus": 1000, "mem": 128000} and out == {}
    assert not any("cover all" in r for r in h.core.allocator.explain(framework.framework_id, 0))


def test_a_want_of_nothing_is_refused_pointing_at_suppress(h):
    framework = h.framework()
    empty = scheduler_pb2.Wants(resources=Resources.parse("ports:[31000-31001]").to_proto())
    with pytest.raises(CallError) as e:
        framework.call("Demand", wants=empty)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Suppress" in e.value.message
