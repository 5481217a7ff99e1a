"""A framework's SQLite state replicated through a real ZooKeeper: standbys read exactly what the
leader committed, snapshots bound the log, and a deposed leader's commits land nowhere."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from agora.common import zk_log
from agora.common.election import zk_client
from agora.common.zk_log import LogFenced, ZkLog
from agora.frameworks.batch.store import JobStore
from agora.frameworks.sdk import replication
from agora.frameworks.sdk.replication import ReplicatedDatabase, decode_entry, encode_entry
from agora.frameworks.service.store import ServiceStore
from agora.v1 import batch_pb2, services_pb2


@pytest.fixture
def zk(zookeeper):
    client = zk_client(zookeeper.address, 5.0)
    client.start(10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def path(zk):
    path = f"/replication-{uuid.uuid4().hex}"
    fence = zk.create(
        f"{path}/election/member_", b"{}", ephemeral=True, sequence=True, makepath=True
    )
    return path, fence


def job(job_id: str, instances: int, name: str = "test") -> batch_pb2.Job:
    out = batch_pb2.Job(job_id=job_id, state=batch_pb2.JOB_RUNNING)
    out.spec.name = name
    out.spec.instances = instances
    for i in range(instances):
        out.instances.add(index=i, state=batch_pb2.INSTANCE_PENDING)
    return out


def standby(zk, path: str) -> ReplicatedDatabase:
    replica = ReplicatedDatabase(ZkLog(zk, path))
    replica.catch_up(sync=True)
    return replica


def test_entries_keep_bytes_numbers_and_nulls():
    statements = [("INSERT INTO t VALUES (?, ?, ?, ?)", [[b"\x00\xff", 1.5, None, "x"]])]
    assert decode_entry(encode_entry(statements)) == statements


def test_a_standby_loads_exactly_what_the_leader_committed(zk, path):
    base, fence = path
    leader = JobStore(ReplicatedDatabase(ZkLog(zk, base, fence=fence)))
    leader.set_framework_id("framework-1")
    first = job("job-1", 3)
    leader.put_job(first)
    leader.put_job(job("job-2", 1))
    leader.commit()
    first.instances[1].state = batch_pb2.INSTANCE_RUNNING
    leader.put_job(first, [1])
    leader.commit()
    leader.set_owner_weight("ana", 3.0)
    leader.delete_jobs(["job-2"])

    copy = JobStore(standby(zk, base))
    assert copy.framework_id() == "framework-1"
    assert [j.job_id for j in copy.load_jobs()] == ["job-1"]
    assert copy.load_jobs()[0] == first
    assert copy.owner_weights() == {"ana": 3.0}


def test_the_services_store_replicates_too(zk, path):
    base, fence = path
    leader = ServiceStore(ReplicatedDatabase(ZkLog(zk, base, fence=fence)))
    leader.put_app(services_pb2.App(id="web"))
    leader.put_app(services_pb2.App(id="db"))
    leader.delete_app("db")
    copy = ServiceStore(standby(zk, base))
    assert [app.id for app in copy.apps()] == ["web"]


def test_snapshots_bound_the_log_and_a_late_standby_starts_from_one(zk, path, monkeypatch):
    base, fence = path
    monkeypatch.setattr(replication, "COMPACT_BYTES", 20_000)
    leader = JobStore(ReplicatedDatabase(ZkLog(zk, base, fence=fence)))
    early = standby(zk, base)
    for n in range(60):
        leader.put_job(job(f"job-{n:03d}", 20, name="x" * 200))
        leader.commit()
    entries = zk.get_children(f"{base}/log")
    assert zk.exists(f"{base}/snapshot") is not None
    assert len(entries) < 60, "compaction deleted the entries its snapshot covers"

    late = JobStore(standby(zk, base))
    assert [j.job_id for j in late.load_jobs()] == [f"job-{n:03d}" for n in range(60)]
    early.catch_up()  # behind several snapshots: it loads the latest, then the tail
    assert len(JobStore(early).load_jobs()) == 60


def test_an_entry_larger_than_a_znode_is_stored_in_parts(zk, path, monkeypatch):
    base, fence = path
    monkeypatch.setattr(zk_log, "PART_BYTES", 4096)  # a small znode: the same path, faster
    leader = JobStore(ReplicatedDatabase(ZkLog(zk, base, fence=fence)))
    big = job("job-big", 300)
    for i, instance in enumerate(big.instances):
        instance.attempts.add(attempt=1, task_id=uuid.uuid4().hex, hostname=str(i))
    leader.put_job(big)
    leader.commit()
    assert any(name.startswith("entry-") for name in zk.get_children(f"{base}/parts"))
    assert JobStore(standby(zk, base)).load_jobs() == [big]


def test_a_deposed_leader_commits_nothing_and_keeps_what_it_noted(zk, path):
    base, fence = path
    fenced = []
    replica = ReplicatedDatabase(ZkLog(zk, base, fence=fence, on_fenced=lambda: fenced.append(1)))
    leader = JobStore(replica)
    leader.put_job(job("job-1", 1))
    leader.commit()

    zk.delete(fence)  # what ZooKeeper does when the leader's session expires
    leader.put_job(job("job-2", 1))
    # The stores' own error for a failed write: they keep what was noted.
    with pytest.raises(sqlite3.OperationalError, match="not stored") as failed:
        leader.commit()
    assert isinstance(failed.value.__cause__, LogFenced)
    with pytest.raises(sqlite3.OperationalError):
        leader.set_framework_id("framework-x")
    assert fenced
    assert leader.uncommitted, "the change stays noted, as after a failed disk write"
    assert [j.job_id for j in leader.load_jobs()] == ["job-1"], "rolled back locally too"
    assert [j.job_id for j in JobStore(standby(zk, base)).load_jobs()] == ["job-1"]


class Unanswered:
    """A kazoo client whose transactions get no answer (the connection dropped mid-call)."""

    def __init__(self, zk) -> None:
        self._zk = zk

    def transaction(self):
        from kazoo.exceptions import ConnectionLoss

        zk = self._zk

        class Tx:
            def __init__(self) -> None:
                self._tx = zk.transaction()

            def check(self, *a):
                self._tx.check(*a)

            def create(self, *a, **k):
                self._tx.create(*a, **k)

            def commit_async(self):
                self._tx.commit()  # it lands...

                class Lost:
                    def get(self, timeout=None):
                        raise ConnectionLoss()  # ...but the answer is lost

                return Lost()

        return Tx()

    def __getattr__(self, name):
        return getattr(self._zk, name)


def test_an_append_without_an_answer_steps_the_leader_down(zk, path):
    """It may have landed: the leader must not go on as if it had not (its successor reads
    the log); standbys may replay it, the log being the one truth."""
    base, fence = path
    doubts: list[str] = []
    log = ZkLog(Unanswered(zk), base, fence=fence, on_uncertain=doubts.append)
    leader = JobStore(ReplicatedDatabase(ZkLog(zk, base, fence=fence)))
    leader.put_job(job("job-1", 1))
    leader.commit()
    leader._db.log = log  # the next answer is lost
    leader.put_job(job("job-2", 1))
    with pytest.raises(sqlite3.OperationalError, match="no answer"):
        leader.commit()
    assert doubts and "no answer from ZooKeeper" in doubts[0]
    assert [j.job_id for j in JobStore(standby(zk, base)).load_jobs()] == ["job-1", "job-2"]


def test_statements_a_copy_could_not_replay_are_refused(zk, path):
    base, fence = path
    db = ReplicatedDatabase(ZkLog(zk, base, fence=fence))
    JobStore(db)
    for sql in (
        "CREATE TABLE t (x)",
        "WITH a AS (SELECT 1) INSERT INTO owner_weights VALUES ('x', 2)",
    ):
        with pytest.raises(sqlite3.OperationalError, match="only INSERT"):
            db.execute(sql)
    assert standby(zk, base).execute("SELECT count(*) FROM owner_weights").fetchone() == (0,)
