"""`agora batch --zk`: two batch daemons on a real ZooKeeper, one leading. The leader killed
with SIGKILL mid-job: the standby takes the framework over with its state, clients reach it
through the master or through either daemon's port, and every instance runs exactly once."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import uuid
from collections import Counter

import pytest
from batch_harness import BatchCluster
from harness import Daemon, eventually_async

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path, in_process_batch=False).start()
    yield c
    await c.stop()


class BatchSet:
    """Two `agora batch --zk` processes on fixed ports (a member that re-executes itself
    comes back where it was)."""

    def __init__(self, cluster: BatchCluster, zk_address: str, root) -> None:
        self.url = f"zk://{zk_address}/batch-{uuid.uuid4().hex[:8]}"
        self.ports = [free_port(), free_port()]
        self.daemons: list[Daemon | None] = [None, None]
        self.master = cluster.master.address
        self.root = root

    def start(self, i: int) -> Daemon:
        args = ["batch", "--master", self.master, "--zk", self.url]
        args += ["--port", str(self.ports[i]), "--state-dir", str(self.root / f"batch-{i}")]
        args += ["--retry-backoff", "0.05", "--log-level", "debug"]
        log = self.root / "logs" / f"batch-{i}.log"
        self.daemons[i] = Daemon(args, log).start()
        return self.daemons[i]

    def leader(self) -> int | None:
        for i, d in enumerate(self.daemons):
            if d is not None and d.alive() and any(s.startswith("batch leading") for s in d.lines):
                return i
        return None

    def stop(self) -> None:
        for d in self.daemons:
            if d is not None:
                d.stop()


async def test_a_killed_leader_is_replaced_and_its_job_finishes_once(cluster, zookeeper, tmp_path):
    members = BatchSet(cluster, zookeeper.address, tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    try:
        await asyncio.to_thread(members.start, 0)
        await eventually_async(lambda: members.leader() == 0, message="the first member leads")
        await asyncio.to_thread(members.start, 1)
        assert members.daemons[1].lines[0].startswith("batch standing by")

        # Each instance leaves a marker per run; half are gated, so the job spans the kill.
        script = (
            f"touch {markers}/$AGORA_INSTANCE.$AGORA_TASK_ID; "
            f"if [ $AGORA_INSTANCE -ge 20 ]; then "
            f"while [ ! -f {tmp_path}/go ]; do sleep 0.05; done; fi"
        )
        submitted = await cluster.cli(
            "job", "submit", "--name", "spans", "--instances", "40", "--json", "--", script
        )
        assert submitted.code == 0, submitted.err
        job_id = json.loads(submitted.out)["job_id"]

        async def counts():
            result = await cluster.cli("job", "status", job_id, "--json")
            return json.loads(result.out)["counts"] if result.code == 0 else {}

        await eventually_async(
            lambda: len(list(markers.iterdir())) >= 25, timeout=60, message="the job under way"
        )
        await asyncio.to_thread(members.daemons[0].kill, signal.SIGKILL)
        # Asked at once, through the master (which still names the dead leader until the new
        # one subscribes), a client waits out the failover rather than fail.
        during = await cluster.cli("job", "status", job_id, "--json")
        assert during.code == 0, during.err
        assert members.leader() == 1

        # The standby's own port answers now; the dead one's is refused and a client asking
        # the master is sent to the new leader.
        listed = await cluster.cli("job", "list", "--batch", members.daemons[1].address)
        assert listed.code == 0, listed.err
        assert job_id in listed.out
        (tmp_path / "go").touch()

        async def done():
            got = await counts()
            return got.get("succeeded") == 40

        await eventually_async(done, timeout=90, message="all 40 instances succeeded")
        runs = Counter(p.name.split(".", 1)[0] for p in markers.iterdir())
        assert sorted(runs, key=int) == [str(i) for i in range(40)], "no instance lost"
        assert set(runs.values()) == {1}, f"no instance run twice: {runs}"

        # The killed member comes back as a standby and sends clients to the leader.
        await asyncio.to_thread(members.start, 0)
        assert members.daemons[0].lines[0].startswith("batch standing by")
        status = await cluster.cli("job", "status", job_id, "--batch", members.daemons[0].address)
        assert status.code == 0, status.err
        assert "succeeded" in status.out
    finally:
        members.stop()
