"""Issue 37, item 1, through real daemons with real TLS: who registered a framework id and an
agent id is remembered across a master restart (SQLite) and a failover (ZooKeeper); a hostile
certificate the ACLs otherwise allow cannot claim either afterwards, and the owners can."""

from __future__ import annotations

import asyncio
import json
import uuid

import grpc
import pytest
from ha import free_port
from harness import Daemon, agora
from master_harness import register_held

from agora.common.credentials import Credentials
from agora.common.rpc import open_channel
from agora.v1 import (
    common_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

pytestmark = pytest.mark.e2e

ACLS = """
register_agents: [{principals: [agent-1, agent-2]}]
register_frameworks: [{principals: [batch, mallory], roles: ["*"]}]
read_state: [{principals: [ANY]}]
"""


class Cluster:
    def __init__(self, tmp_path, zookeeper=None) -> None:
        self.root = tmp_path
        self.certs = tmp_path / "certs"
        assert agora("tls", "init", str(self.certs)).returncode == 0
        for name, kind in [("master", "master"), ("batch", "framework")] + [
            ("mallory", "framework"),
            ("agent-1", "agent"),
            ("agent-2", "agent"),
        ]:
            made = agora("tls", "issue", "--ca", str(self.certs), "--name", name, "--for", kind)
            assert made.returncode == 0, made.stderr
        (tmp_path / "acls.yaml").write_text(ACLS)
        self.zk = f"zk://{zookeeper.address}/own-{uuid.uuid4().hex[:8]}" if zookeeper else None
        self.ports = [free_port() for _ in range(2 if zookeeper else 1)]
        self.masters: list[Daemon | None] = [None] * len(self.ports)

    def start_master(self, i: int) -> Daemon:
        store = ["--zk", self.zk, "--zk-session-timeout", "1.5"] if self.zk else []
        store = store or ["--state-dir", str(self.root / "state")]
        daemon = Daemon(
            ["master", "--port", str(self.ports[i]), "--acls", str(self.root / "acls.yaml")]
            + store
            + ["--tls-ca", str(self.certs / "ca.pem"), "--tls-cert"]
            + [str(self.certs / "master.pem"), "--tls-key", str(self.certs / "master-key.pem")],
            self.root / f"master-{i}.log",
        ).start()
        self.masters[i] = daemon
        return daemon

    def credentials(self, name: str) -> Credentials:
        c = self.certs
        return Credentials.load(c / "ca.pem", c / f"{name}.pem", c / f"{name}-key.pem")

    def leader(self) -> str:
        """localhost:PORT of the leading master (the name its certificate carries)."""
        tls = ["--tls-ca", str(self.certs / "ca.pem"), "--tls-cert"]
        tls += [str(self.certs / "agent-1.pem"), "--tls-key", str(self.certs / "agent-1-key.pem")]
        where = self.zk or f"localhost:{self.ports[0]}"
        for _ in range(100):
            out = agora("cluster", "masters", "--json", "--master", where, "--timeout", "3", *tls)
            if out.returncode == 0:
                rows = [r for r in json.loads(out.stdout) if r["leading"]]
                if rows:
                    return "localhost:" + rows[0]["address"].rsplit(":", 1)[1]
        raise AssertionError("no leader")

    def stop(self) -> None:
        for m in self.masters:
            if m is not None:
                m.stop()


async def subscribe(address: str, credentials: Credentials, framework_id: str = ""):
    """(framework id, None) or (None, the refusal)."""
    async with open_channel(address, credentials) as channel:
        info = common_pb2.FrameworkInfo(
            name="batch", user="nobody", role="*", framework_id=framework_id,
            failover_timeout_seconds=600,
        )  # fmt: skip
        call = scheduler_pb2_grpc.SchedulerStub(channel).Subscribe(
            scheduler_pb2.SubscribeRequest(framework=info)
        )
        try:
            event = await call.read()
            return event.subscribed.framework_id, None
        except grpc.aio.AioRpcError as e:
            return None, e
        finally:
            call.cancel()


async def register(address: str, credentials: Credentials, agent_id: str = ""):
    """(agent id, None) or (None, the refusal)."""
    channel, call, reply = await register_held(address, credentials, agent_id)
    if call is None:
        return None, reply
    call.cancel()
    await channel.close()
    return reply.agent_id, None


@pytest.mark.parametrize("store", ["sqlite", "zookeeper"])
async def test_owners_keep_their_ids_across_a_restart_or_failover(tmp_path, request, store):
    zookeeper = request.getfixturevalue("zookeeper") if store == "zookeeper" else None
    cluster = Cluster(tmp_path, zookeeper)
    try:
        first = cluster.start_master(0)
        address = await asyncio.to_thread(cluster.leader)
        framework_id, refused = await subscribe(address, cluster.credentials("batch"))
        assert framework_id, refused
        agent_id, refused = await register(address, cluster.credentials("agent-1"))
        assert agent_id, refused

        if zookeeper is not None:
            cluster.start_master(1)
            first.kill()  # kill -9: the standby leads, from the registry in ZooKeeper
        else:
            first.stop()
            cluster.start_master(0)  # the same --state-dir
        address = await asyncio.to_thread(cluster.leader)

        _, refused = await subscribe(address, cluster.credentials("mallory"), framework_id)
        assert refused is not None and refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"may not fail over to framework {framework_id}" in refused.details()
        _, refused = await register(address, cluster.credentials("agent-2"), agent_id)
        assert refused is not None and refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "which agent-1 registered" in refused.details()
        # The owners take their ids back.
        again, refused = await subscribe(address, cluster.credentials("batch"), framework_id)
        assert again == framework_id, refused
        again, refused = await register(address, cluster.credentials("agent-1"), agent_id)
        assert again == agent_id, refused
    finally:
        cluster.stop()
