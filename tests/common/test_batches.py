"""next_batch: what a relay or the master puts in one stream message (common/batches.py)."""

from __future__ import annotations

from agora.common.batches import next_batch
from agora.v1 import agent_link_pb2, agent_relay_pb2

Item = agent_relay_pb2.RelayUp.Item
AgentMessage = agent_link_pb2.AgentMessage


def _item(link: int, size: int) -> Item:
    """An item of about `size` bytes (a Register whose hostname fills it)."""
    register = AgentMessage.Register()
    register.info.hostname = "h" * size
    return Item(link=link, message=AgentMessage(register=register))


def test_items_go_in_order_up_to_the_byte_budget_and_the_rest_wait():
    items = [_item(i, 1000) for i in range(1, 11)]
    batch, oversized = next_batch(items, budget=3500, limit=10_000)
    assert [i.link for i in batch] == [1, 2, 3]
    assert oversized == []
    assert [i.link for i in items] == [4, 5, 6, 7, 8, 9, 10]  # taken from the front, in place
    assert sum(i.ByteSize() for i in batch) <= 3500


def test_one_item_over_the_budget_still_goes_alone():
    items = [_item(1, 5000), _item(2, 10)]
    batch, _ = next_batch(items, budget=1000, limit=10_000)
    assert [i.link for i in batch] == [1]
    assert [i.link for i in items] == [2]


def test_an_item_too_big_to_send_is_set_apart_and_the_others_still_go():
    items = [_item(1, 10), _item(2, 50_000), _item(3, 10)]
    batch, oversized = next_batch(items, budget=100_000, limit=20_000)
    assert [i.link for i in batch] == [1, 3]
    assert [i.link for i in oversized] == [2]
    assert items == []


def test_nothing_waiting_makes_an_empty_batch():
    assert next_batch([]) == ([], [])
