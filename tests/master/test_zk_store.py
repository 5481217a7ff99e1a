"""The ZooKeeper registry refuses a deposed leader's writes (the contract test covers the rest)."""

from __future__ import annotations

import uuid

import pytest

from agora.common.election import zk_client
from agora.master.zk_store import StoreFenced, ZkRegistryStore
from agora.v1 import common_pb2


@pytest.fixture
def zk(zookeeper):
    client = zk_client(zookeeper.address, 5.0)
    client.start(10)
    yield client
    client.stop()
    client.close()


def test_a_leader_whose_election_znode_is_gone_can_no_longer_write(zk):
    path = f"/fence-{uuid.uuid4().hex}"
    fence = zk.create(
        f"{path}/election/member_", b"{}", ephemeral=True, sequence=True, makepath=True
    )
    leader = ZkRegistryStore(zk, path, fence=fence)
    leader.put_agent(common_pb2.AgentInfo(agent_id="a1", hostname="h1"), 1.0)
    leader.put_weight("web", 2.0)

    zk.delete(fence)  # what ZooKeeper does when the leader's session expires

    with pytest.raises(StoreFenced, match="not writing"):
        leader.put_agent(common_pb2.AgentInfo(agent_id="a2", hostname="h2"), 2.0)
    with pytest.raises(StoreFenced):
        leader.remove_agent("a1", "should not happen")
    with pytest.raises(StoreFenced):
        leader.put_weight("web", 9.0)
    successor = ZkRegistryStore(zk, path)
    assert [a.info.agent_id for a in successor.agents()] == ["a1"]
    assert successor.removed("agent") == {}
    assert successor.weights() == {"web": 2.0}
