"""HeldOffers: a dict of held offers that also finds an agent's pieces without a scan."""

from __future__ import annotations

import pytest

from agora.experiments.load.held import HeldOffers
from agora.v1 import common_pb2


def offer(offer_id: str, agent_id: str) -> common_pb2.Offer:
    return common_pb2.Offer(offer_id=offer_id, agent_id=agent_id)


def test_pieces_are_taken_by_agent_and_popped_by_id_consistently():
    held = HeldOffers()
    for offer_id, agent_id in (("o1", "a"), ("o2", "b"), ("o3", "a"), ("o4", "c")):
        held[offer_id] = offer(offer_id, agent_id)
    assert len(held) == 4 and "o3" in held and held.agents() == ["a", "b", "c"]
    assert [o.offer_id for o in held.take_agent("a")] == ["o1", "o3"]
    assert held.take_agent("a") == [] and "o1" not in held and len(held) == 2
    assert held.pop("o2").agent_id == "b" and held.agents() == ["c"]
    assert held.pop("o2", None) is None
    with pytest.raises(KeyError):
        held.pop("o2")
    held["o4"] = offer("o4", "d")  # the same id again: the agent index follows
    assert held.agents() == ["d"] and [o.offer_id for o in held.values()] == ["o4"]
    held.clear()
    assert not held and held.agents() == []
