"""The pure parts of keeping a finished task's cgroups for the next task (agora.agent.isolation):
which limits a kept cgroup needs written, when one is as good as new, the CPU time it already
counts, and where the Python wrapper steps back to. The real cgroups are in
test_agent_isolation.py."""

from __future__ import annotations

import pytest

from agora.agent import cgroup_members
from agora.agent.isolation import Limits, limit_writes, reusable, stat_slack_bytes, task_limits
from agora.agent.usage import task_usage
from agora.common import Resources

SMALL = Limits(memory_bytes=32 << 20, cpu_shares=102)
CAPPED = Limits(memory_bytes=64 << 20, cpu_shares=512, cpu_quota_us=50_000)

V1_CLEAN_STAT = "cache 8192\nrss 0\nrss_huge 0\nshmem 0\nmapped_file 0\nswap 0\nunevictable 0\n"
V1_OOM_NONE = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"


def test_a_new_cgroup_gets_every_limit_the_task_has():
    assert limit_writes("memory", SMALL) == [("memory.limit_in_bytes", str(32 << 20))]
    assert limit_writes("cpu", CAPPED) == [
        ("cpu.shares", "512"),
        ("cpu.cfs_period_us", "100000"),  # the period before the quota it bounds
        ("cpu.cfs_quota_us", "50000"),
    ]
    assert limit_writes("", SMALL) == [("memory.max", str(32 << 20)), ("cpu.weight", "4")]
    assert limit_writes("memory", Limits(None, None)) == []


def test_a_kept_cgroup_is_written_only_what_differs_and_lifted_limits_go_back_to_none():
    assert limit_writes("memory", SMALL, SMALL) == []
    assert limit_writes("cpu", SMALL, SMALL) == []
    assert limit_writes("memory", CAPPED, SMALL) == [("memory.limit_in_bytes", str(64 << 20))]
    # From a capped task to an uncapped one: the quota is lifted, not left behind.
    assert limit_writes("cpu", SMALL, CAPPED) == [
        ("cpu.shares", "102"),
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "-1"),
    ]
    assert limit_writes("", SMALL, CAPPED) == [
        ("memory.max", str(32 << 20)),
        ("cpu.weight", "4"),
        ("cpu.max", "max 100000"),
    ]
    assert limit_writes("memory", Limits(None, None), SMALL) == [("memory.limit_in_bytes", "-1")]
    # Limits as the task manager makes them: two tasks alike need no write at all.
    alike = task_limits(Resources.of(cpus=0.1, mem=16))
    assert limit_writes("cpu", alike, task_limits(Resources.of(cpus=0.1, mem=16))) == []


def test_a_cgroup_is_kept_only_when_it_is_as_good_as_new():
    assert reusable(["", "\n"], V1_OOM_NONE, V1_CLEAN_STAT)  # page cache may stay
    v2_events = "low 0\nhigh 0\nmax 4\noom 0\noom_kill 0\n"
    v2_stat = "anon 0\nfile 40960\nkernel 8192\nshmem 0\nunevictable 0\n"
    assert reusable([""], v2_events, v2_stat)
    # A process still inside, or one the OOM killer ended (its count never goes back to 0).
    assert not reusable(["4242\n", ""], V1_OOM_NONE, V1_CLEAN_STAT)
    assert not reusable([""], V1_OOM_NONE.replace("oom_kill 0", "oom_kill 1"), V1_CLEAN_STAT)
    assert not reusable([""], v2_events.replace("oom_kill 0", "oom_kill 3"), v2_stat)
    # A kernel that does not count OOM kills (before 4.13): no way to tell, so never kept.
    assert not reusable([""], "oom_kill_disable 0\nunder_oom 0\n", V1_CLEAN_STAT)
    # Memory the next task could not get back: shared memory (a file left in /dev/shm),
    # anonymous memory, locked pages.
    assert not reusable([""], V1_OOM_NONE, V1_CLEAN_STAT.replace("shmem 0", "shmem 4096"))
    assert not reusable([""], V1_OOM_NONE, V1_CLEAN_STAT.replace("rss 0", "rss 8192"))
    assert not reusable([""], v2_events, v2_stat.replace("anon 0", "anon 4096"))
    assert not reusable([""], v2_events, v2_stat.replace("unevictable 0", "unevictable 1"))
    # Swap, counted in memory.stat (v1) or memory.swap.current (v2), is held too.
    assert not reusable([""], V1_OOM_NONE, V1_CLEAN_STAT.replace("swap 0", "swap 4096"))
    assert not reusable([""], v2_events, v2_stat, swap_current="4096\n")
    # memory.stat lags: what may not yet be counted as freed is read as nothing, no more.
    lagging = V1_CLEAN_STAT.replace("rss 0", "rss 110592")
    assert reusable([""], V1_OOM_NONE, lagging, slack=128 * 4096)
    assert not reusable([""], V1_OOM_NONE, lagging.replace("shmem 0", "shmem 4096"), slack=110592)
    # Unreadable files say nothing: not kept.
    assert not reusable([""], None, V1_CLEAN_STAT)
    assert not reusable([""], V1_OOM_NONE, None)
    # Nor does a stat without the keys that say what is held: kept on no one's word.
    assert not reusable([""], V1_OOM_NONE, "cache 0\nrss 0\n")
    assert not reusable([""], v2_events, "anon 0\nfile 0\n")
    # The OOM killer turned off in it (root can): the next task would hang at its limit.
    assert not reusable(
        [""], V1_OOM_NONE.replace("oom_kill_disable 0", "oom_kill_disable 1"), V1_CLEAN_STAT
    )
    # What went to swap (v1 in memory.stat where swap is accounted, v2 in its own file).
    assert not reusable([""], V1_OOM_NONE, V1_CLEAN_STAT.replace("swap 0", "swap 4096"))
    assert not reusable([""], v2_events, v2_stat, swap_current="8192\n")
    assert reusable([""], v2_events, v2_stat, swap_current="0\n")


def test_the_cpu_time_a_cgroup_counts_is_read_from_v2_or_v1_cpuacct(tmp_path):
    v2, v1cpu, v1mem = tmp_path / "v2", tmp_path / "cpu", tmp_path / "memory"
    for d in (v2, v1cpu, v1mem):
        d.mkdir()
    (v2 / "cpu.stat").write_text("usage_usec 3500000\nuser_usec 2500000\nsystem_usec 1000000\n")
    (v1cpu / "cpu.stat").write_text("nr_periods 0\nnr_throttled 0\nthrottled_time 0\n")
    (v1cpu / "cpuacct.stat").write_text("user 300\nsystem 100\n")
    assert cgroup_members.cpu_seconds([str(v2)], "cpu.stat") == (2.5, 1.0)
    ticks = cgroup_members._TICKS
    assert cgroup_members.cpu_seconds([str(v1mem), str(v1cpu)], "cpuacct.stat") == (
        300 / ticks,
        100 / ticks,
    )
    # v1's cpu.stat counts throttling, not time.
    assert cgroup_members.cpu_seconds([str(v1mem), str(v1cpu)], "cpu.stat") is None


def test_a_task_in_a_kept_cgroup_is_charged_only_its_own_cpu_time(tmp_path):
    cgroup, sandbox = tmp_path / "run-1", tmp_path / "sandbox"
    cgroup.mkdir()
    sandbox.mkdir()
    (cgroup / "cpu.stat").write_text("usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n")
    (cgroup / "memory.current").write_text("4096\n")
    (cgroup / "memory.stat").write_text("anon 4096\nfile 0\n")
    (cgroup / "memory.max").write_text(str(32 << 20))
    fresh = task_usage(None, [str(cgroup)], sandbox)
    assert (fresh.cpu_user_seconds, fresh.cpu_system_seconds) == (4.0, 1.0)
    kept = task_usage(None, [str(cgroup)], sandbox, cpu_base=[3.0, 0.75])
    assert kept.source == "cgroup"
    assert (kept.cpu_user_seconds, kept.cpu_system_seconds) == pytest.approx((1.0, 0.25))
    assert kept.mem_rss_bytes == 4096 and kept.mem_limit_bytes == 32 << 20


@pytest.mark.parametrize(
    ("own", "cgroups", "expected"),
    [
        (  # v1, cpu and cpuacct mounted together, the agent in a memory cgroup of its own
            "4:memory:/svc/agent\n2:cpu,cpuacct:/\n0::/\n",
            ["/sys/fs/cgroup/memory/svc/agent/agora/a1/run-1", "/sys/fs/cgroup/cpu/agora/a1/run-1"],
            ["/sys/fs/cgroup/memory/svc/agent", "/sys/fs/cgroup/cpu"],
        ),
        (  # v1 through the joint mount's own name
            "2:cpu,cpuacct:/x\n",
            ["/sys/fs/cgroup/cpu,cpuacct/x/agora/a1/run-1"],
            ["/sys/fs/cgroup/cpu,cpuacct/x"],
        ),
        (  # v1, cpu and cpuacct mounted apart
            "3:cpuacct:/\n2:cpu:/a\n1:memory:/a\n",
            ["/sys/fs/cgroup/memory/a/agora/a1/run-1", "/sys/fs/cgroup/cpu/a/agora/a1/run-1"],
            ["/sys/fs/cgroup/memory/a", "/sys/fs/cgroup/cpu/a"],
        ),
        (  # v2
            "0::/system.slice/agora-agent.service\n",
            ["/sys/fs/cgroup/system.slice/agora-agent.service/agora/a1/run-1"],
            ["/sys/fs/cgroup/system.slice/agora-agent.service"],
        ),
    ],
)
def test_the_python_wrapper_steps_back_to_its_own_cgroups(own, cgroups, expected):
    assert cgroup_members.homes(cgroups, own=own) == expected


def test_the_stat_slack_follows_the_kernels_flush_threshold_and_stays_small():
    # 64 pages a CPU waiting to be folded in, and as much again on each CPU.
    assert stat_slack_bytes(cpus=2, page=4096) == 2 * 128 * 4096
    # A large machine's threshold is megabytes: capped, so real leftovers are not kept.
    assert stat_slack_bytes(cpus=256, page=4096) == 4 << 20
