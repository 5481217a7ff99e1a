"""Pure pieces of the agent: resource detection arithmetic, the update queue and its log,
sandbox path confinement (openat2 and the fallback walk), exit outcomes and the task environment."""

import itertools
import os
import pwd
import threading
import time
from pathlib import Path

import pytest

from agora.agent import fork_server_process, proc_stat, sandbox_files, status_updates, task_user
from agora.agent.launcher import Wrapper, command_argv, exit_outcome, task_environment
from agora.agent.resources_detect import default_resources, detect_resources
from agora.agent.sandbox_files import SandboxPathError, open_beneath
from agora.agent.status_updates import UpdateLog
from agora.agent.task_user import TaskUserError, resolve_task_user
from agora.agent.update_queue import UpdateQueue
from agora.common import Resources, new_uuid
from agora.v1 import common_pb2


def status(task_id: str, state: int = common_pb2.TASK_RUNNING) -> common_pb2.TaskStatus:
    return common_pb2.TaskStatus(task_id=task_id, state=state, uuid=new_uuid())


# --- resource detection ------------------------------------------------------------------


def test_big_machine_keeps_1gb_memory_and_5gb_disk_for_itself():
    r = default_resources(cpus=8, mem_total_mb=16384, disk_total_mb=100_000)
    assert r.scalar("cpus") == 8
    assert r.scalar("mem") == 16384 - 1024
    assert r.scalar("disk") == 100_000 - 5120
    assert r.port_ranges() == ((31000, 32000),)


def test_small_machine_offers_half_its_memory_and_disk():
    r = default_resources(cpus=1, mem_total_mb=1500, disk_total_mb=8000)
    assert r.scalar("mem") == 750
    assert r.scalar("disk") == 4000
    # exactly at the threshold the reservation applies
    assert default_resources(1, 2048, 10240).scalar("mem") == 1024
    assert default_resources(1, 2048, 10240).scalar("disk") == 5120


def test_detection_reads_this_host(tmp_path):
    r = detect_resources(tmp_path / "not-yet-created")
    assert r.scalar("cpus") >= 1 and r.scalar("mem") > 0 and r.scalar("disk") > 0
    assert Resources.parse(r.format()) == r


# --- update queue ------------------------------------------------------------------------


def test_only_the_oldest_update_of_a_task_is_in_flight():
    q = UpdateQueue(initial_backoff=0.5, max_backoff=10)
    starting, running = status("t1", common_pb2.TASK_STARTING), status("t1")
    other = status("t2")
    q.add("fw", starting)
    q.add("fw", running)
    q.add("fw", other)
    assert [s.uuid for _, s in q.due(0.0)] == [starting.uuid, other.uuid]
    q.mark_sent("fw", "t1", 0.0)
    q.mark_sent("fw", "t2", 0.0)
    assert q.due(0.4) == []
    assert q.next_due() == 0.5
    # the ack of the head makes the next update due at once
    assert q.ack("fw", "t1", starting.uuid) == starting
    assert [s.uuid for _, s in q.due(0.4)] == [running.uuid]


def test_resends_back_off_exponentially_up_to_the_cap():
    q = UpdateQueue(initial_backoff=0.5, max_backoff=2.0)
    q.add("fw", status("t"))
    now, gaps = 0.0, []
    for _ in range(5):
        assert q.due(now)
        q.mark_sent("fw", "t", now)
        gaps.append(q.next_due() - now)
        now = q.next_due()
    assert gaps == [0.5, 1.0, 2.0, 2.0, 2.0]


def test_reset_makes_everything_due_and_unknown_acks_are_ignored():
    q = UpdateQueue()
    s = status("t")
    q.add("fw", s)
    q.mark_sent("fw", "t", 0.0)
    assert q.due(0.1) == []
    q.reset()
    assert q.due(0.1) == [("fw", s)]
    assert q.ack("fw", "t", new_uuid()) is None
    assert q.ack("other", "t", s.uuid) is None
    assert q.ack("fw", "t", s.uuid) == s
    assert len(q) == 0 and q.ack("fw", "t", s.uuid) is None


def test_update_log_replays_what_was_not_acknowledged(tmp_path):
    path = tmp_path / "updates.jsonl"
    log = UpdateLog(path)
    log.open(log.replay())
    a, b, c = status("t1"), status("t1", common_pb2.TASK_FINISHED), status("t2")
    for s in (a, b, c):
        log.append_update("fw", s)
    log.append_ack("fw", "t1", a.uuid)
    log.close()
    # a crash mid-append leaves a torn last line
    with open(path, "a") as f:
        f.write('{"u": "fw", "s": "tor')
    pending = UpdateLog(path).replay()
    assert [(fw, s.uuid) for fw, s in pending] == [("fw", b.uuid), ("fw", c.uuid)]
    # compaction keeps exactly the pending ones
    again = UpdateLog(path)
    again.open(again.replay())
    again.close()
    assert len(path.read_text().splitlines()) == 2
    assert [s.uuid for _, s in UpdateLog(path).replay()] == [b.uuid, c.uuid]


MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
/dev/vdb /dev/shm/disk ext4 rw 0 0
ramfs /mnt/my\\040ram ramfs rw 0 0
"""


def test_only_a_log_on_a_filesystem_in_memory_is_fsynced_in_the_loop(tmp_path):
    """An fsync on tmpfs does nothing, so it is not worth a thread; on a disk it can stall, so
    it never runs in the agent's loop, however quick it usually is."""
    assert status_updates.in_memory(Path("/dev/shm/agent/meta/updates.jsonl"), MOUNTS)
    assert status_updates.in_memory(Path("/mnt/my ram/updates.jsonl"), MOUNTS)
    assert not status_updates.in_memory(Path("/var/lib/agora/updates.jsonl"), MOUNTS)
    assert not status_updates.in_memory(Path("/dev/shm/disk/updates.jsonl"), MOUNTS)
    assert not status_updates.in_memory(Path("/dev/shmx/updates.jsonl"), MOUNTS)


@pytest.mark.parametrize("in_loop", [True, False])
async def test_the_update_log_is_synced_either_way(tmp_path, in_loop):
    log = UpdateLog(tmp_path / "updates.jsonl")
    log.fsync_in_loop = in_loop
    log.open([])
    for n in range(3):
        log.append_update("fw", status(f"t{n}"))
        assert log.unsynced
        await log.sync_soon()
        assert not log.unsynced
    log.close()
    assert len(UpdateLog(tmp_path / "updates.jsonl").replay()) == 3


# --- sandbox paths ------------------------------------------------------------------------


@pytest.fixture(params=["openat2", "nofollow-walk"])
def beneath(request, monkeypatch):
    """open_beneath, with the kernel's openat2 and with the fallback walk for older kernels."""
    monkeypatch.setattr(sandbox_files, "_have_openat2", request.param == "openat2" and None)
    return request.param


def _read_all(fd: int) -> bytes:
    try:
        return os.pread(fd, 1 << 16, 0)
    finally:
        os.close(fd)


def test_paths_stay_inside_the_sandbox(tmp_path, beneath):
    sandbox = tmp_path / "sb"
    (sandbox / "sub").mkdir(parents=True)
    (sandbox / "stdout").write_text("x")
    (sandbox / "sub" / "f").write_text("y")
    assert _read_all(open_beneath(sandbox, "stdout")) == b"x"
    assert _read_all(open_beneath(sandbox, "./sub//f")) == b"y"
    os.close(open_beneath(sandbox, "", directory=True))
    for bad in ("../x", "sub/../../x", "/etc/passwd", "a\0b"):
        with pytest.raises(SandboxPathError):
            open_beneath(sandbox, bad)
    (sandbox / "link").symlink_to("/etc")
    with pytest.raises(SandboxPathError, match="outside|symlink"):
        open_beneath(sandbox, "link/passwd")
    (sandbox / "up").symlink_to("../..")
    with pytest.raises(SandboxPathError, match="outside|symlink"):
        open_beneath(sandbox, "up/etc/passwd")
    with pytest.raises(FileNotFoundError):
        open_beneath(sandbox, "missing")
    with pytest.raises(SandboxPathError, match="not a regular file"):
        open_beneath(sandbox, "sub")
    with pytest.raises(SandboxPathError, match="not a directory"):
        open_beneath(sandbox, "stdout", directory=True)
    # A FIFO named like a log would block a plain open for ever; it is refused at once.
    os.mkfifo(sandbox / "fifo")
    with pytest.raises(SandboxPathError, match="not a regular file"):
        open_beneath(sandbox, "fifo")


def test_a_symlink_that_stays_inside_is_followed_only_with_openat2(tmp_path, beneath):
    sandbox = tmp_path / "sb"
    (sandbox / "logs").mkdir(parents=True)
    (sandbox / "logs" / "out").write_text("z")
    (sandbox / "latest").symlink_to("logs")
    if beneath == "openat2":
        assert _read_all(open_beneath(sandbox, "latest/out")) == b"z"
    else:  # without openat2 every symlink is refused: stricter, never less safe
        with pytest.raises(SandboxPathError):
            open_beneath(sandbox, "latest/out")


def test_swapping_a_directory_for_a_symlink_during_reads_never_leads_out(tmp_path, beneath):
    # The race a check-then-open loses: a task flips sandbox/d between a real directory and a
    # symlink to /etc while the agent reads d/passwd.
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    secret = Path("/etc/passwd").read_bytes()
    stop = threading.Event()

    def flip():
        d, real, link = sandbox / "d", sandbox / "real", sandbox / "link"
        real.mkdir()
        (real / "passwd").write_bytes(b"inside")
        link.symlink_to("/etc")
        while not stop.is_set():
            for source in (real, link):
                os.rename(source, d)  # atomic: d is always one or the other
                time.sleep(0.0001)  # lets the reader in while d is this one
                os.rename(d, source)

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes: set[str] = set()
    deadline = time.monotonic() + 30
    try:
        # At least 2,000 reads, and until the race has gone both ways (bounded in time).
        for n in itertools.count():
            both_ways = "read" in outcomes and len(outcomes) >= 2
            if n >= 2000 and both_ways or time.monotonic() > deadline:
                break
            try:
                data = _read_all(open_beneath(sandbox, "d/passwd"))
            except (SandboxPathError, FileNotFoundError) as e:
                outcomes.add(type(e).__name__)
                continue
            assert data != secret
            assert data == b"inside"
            outcomes.add("read")
    finally:
        stop.set()
        flipper.join()
    assert "read" in outcomes  # the race really ran both ways


# --- launching ------------------------------------------------------------------------------


def test_exit_outcomes():
    assert exit_outcome({"exit_code": 0}, killed=False)[0] == common_pb2.TASK_FINISHED
    state, message, _, code = exit_outcome({"exit_code": 3}, killed=False)
    assert (state, message, code) == (common_pb2.TASK_FAILED, "exited with code 3", 3)
    state, message, _, _ = exit_outcome({"signal": 9}, killed=False)
    assert state == common_pb2.TASK_FAILED and "SIGKILL" in message
    assert exit_outcome({"signal": 15}, killed=True)[0] == common_pb2.TASK_KILLED
    state, message, _, _ = exit_outcome({"error": "cannot run 'x': command not found"}, False)
    assert state == common_pb2.TASK_ERROR and "command not found" in message
    assert exit_outcome(None, killed=False)[0] == common_pb2.TASK_FAILED


def test_command_argv_and_environment():
    assert command_argv(common_pb2.CommandInfo(argv=["echo", "hi"])) == ["echo", "hi"]
    assert command_argv(common_pb2.CommandInfo(shell="echo hi")) == ["/bin/sh", "-c", "echo hi"]
    with pytest.raises(ValueError, match="no command"):
        command_argv(common_pb2.CommandInfo())
    task = common_pb2.TaskInfo(
        task_id="t1",
        resources=Resources.parse("cpus:1;ports:[31000-31001,31005-31005]").to_proto(),
        command=common_pb2.CommandInfo(shell="true", environment={"A": "1"}),
    )
    env = task_environment({"PATH": "/bin"}, task, "fw", "agent-1", Path("/sb"))
    assert env["PORT0"] == "31000" and env["PORT1"] == "31001" and env["PORT2"] == "31005"
    assert env["PORT"] == "31000" and "PORT3" not in env
    assert env["AGORA_TASK_ID"] == "t1" and env["AGORA_SANDBOX"] == "/sb"
    assert env["A"] == "1" and env["PATH"] == "/bin"


def test_task_limits_follow_mesos():
    from agora.agent.isolation import task_limits

    limits = task_limits(Resources.parse("cpus:0.5;mem:64"))
    assert limits.memory_bytes == 64 * 1024 * 1024
    assert limits.cpu_shares == 512 and limits.cpu_quota_us is None
    assert 1 <= limits.cpu_weight <= 10000
    capped = task_limits(Resources.parse("cpus:0.5;mem:64"), cpu_hard_limit=True)
    assert capped.cpu_quota_us == 50_000 and capped.cpu_period_us == 100_000
    tiny = task_limits(Resources.parse("cpus:0.001"), cpu_hard_limit=True)
    assert tiny.cpu_shares == 2 and tiny.cpu_quota_us == 1_000 and tiny.memory_bytes is None
    # never limited below Mesos' 32 MB minimum
    assert task_limits(Resources.parse("mem:4")).memory_bytes == 32 * 1024 * 1024


async def test_update_log_is_compacted_once_mostly_acknowledged(tmp_path, monkeypatch):
    from agora.agent import status_updates

    monkeypatch.setattr(status_updates, "COMPACT_AFTER", 20)
    manager = status_updates.StatusUpdateManager(tmp_path / "u.jsonl", send=lambda fw, s: True)
    manager.recover()
    keep = status("keep")
    manager.update("fw", keep)
    for i in range(20):
        s = status(f"t{i}", common_pb2.TASK_FINISHED)
        manager.update("fw", s)
        manager.ack("fw", s.task_id, s.uuid)
    await manager.stop()
    assert len((tmp_path / "u.jsonl").read_text().splitlines()) < 20
    assert [s.uuid for _, s in UpdateLog(tmp_path / "u.jsonl").replay()] == [keep.uuid]


def test_a_wrapper_is_recognised_by_its_start_ticks_even_after_a_clock_step(monkeypatch):
    me = os.getpid()
    ticks = proc_stat.start_ticks(me)
    start = proc_stat.ticks_to_time(ticks)
    assert Wrapper(me, start, me, ticks).alive()
    assert not Wrapper(me, start, me, ticks + 1).alive()  # another process on the same pid
    # The wall clock is stepped by a second: boot time moves, start ticks do not.
    real_boot_time = proc_stat.boot_time
    monkeypatch.setattr(proc_stat, "boot_time", lambda: real_boot_time() + 1.0)
    assert Wrapper(me, start, me, ticks).alive()
    # A record from an older agent (no ticks) falls back to the wall-clock start.
    monkeypatch.undo()
    assert Wrapper(me, start, me).alive()
    assert not Wrapper(me, start - 5, me).alive()


def test_the_launcher_keeps_no_pipe_when_it_cannot_fork(monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(fork_server_process.os, "fork", no_fork)
    spares = fork_server_process._Spares()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        spares.refill()
        with pytest.raises(OSError):
            spares.launch(b"/nonexistent/run\t{}")
    assert len(os.listdir("/proc/self/fd")) == before


# --- task users -------------------------------------------------------------------------------


def test_task_user_resolution(monkeypatch):
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert resolve_task_user("") is None  # no user named: the agent's own
    assert resolve_task_user(me) is None  # the agent's own: nothing to switch
    with pytest.raises(TaskUserError, match="no Unix user 'no-such-user-xyz'"):
        resolve_task_user("no-such-user-xyz")
    # An agent that is not root can only run tasks as itself, and says what to do.
    monkeypatch.setattr(task_user.os, "geteuid", lambda: pwd.getpwnam("nobody").pw_uid)
    assert resolve_task_user("nobody") is None
    with pytest.raises(TaskUserError, match="runs as 'nobody' and cannot start tasks as 'root'"):
        resolve_task_user("root")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_root_agent_switches_to_the_user_with_its_groups():
    nobody = pwd.getpwnam("nobody")
    user = resolve_task_user("nobody")
    assert user is not None
    assert (user.uid, user.gid, user.home) == (nobody.pw_uid, nobody.pw_gid, nobody.pw_dir)
    assert nobody.pw_gid in user.groups
    # What the wrapper is told to switch to: nobody's own ids and groups, not the agent's.
    assert user.wrapper_user() == (nobody.pw_uid, nobody.pw_gid, user.groups)


# --- usage ------------------------------------------------------------------------------------


def test_usage_from_proc_counts_the_process_group_and_the_sandbox(tmp_path):
    import subprocess
    import sys

    from agora.agent.usage import task_usage

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x" * 300_000)
    (tmp_path / "link").symlink_to("/usr")  # not followed: /usr is not the sandbox's
    code = (
        "b = bytearray(40 << 20); b[::4096] = b'1' * len(b[::4096]); print(1, flush=True); input()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        process_group=0,
    )
    try:
        assert child.stdout.readline().strip() == b"1"
        usage = task_usage(child.pid, [], tmp_path, mem_allocated_bytes=64 << 20)
        assert usage.source == "proc"
        assert 40 << 20 <= usage.mem_rss_bytes < 200 << 20
        assert usage.cpu_user_seconds + usage.cpu_system_seconds > 0
        assert usage.mem_limit_bytes == 64 << 20  # no cgroup: the allocation holds
        assert 300_000 <= usage.disk_used_bytes < 1 << 20
        # Another process group is not counted.
        assert task_usage(os.getpgid(0), [], tmp_path).mem_rss_bytes != usage.mem_rss_bytes
    finally:
        child.kill()
        child.communicate()  # waits, and closes its pipes


def test_a_memory_limit_hit_is_the_reason_unless_the_agent_was_killing(tmp_path):
    from agora.agent.cgroup_members import memory_limit_hit

    v1, v2, calm = tmp_path / "v1", tmp_path / "v2", tmp_path / "calm"
    for d in (v1, v2, calm):
        d.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (v1 / "memory.limit_in_bytes").write_text(str(64 * 2**20))
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    (v2 / "memory.max").write_text(str(32 * 2**20))
    (calm / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    assert memory_limit_hit([str(v1)]) == 64 * 2**20
    assert memory_limit_hit([str(calm), str(v2)]) == 32 * 2**20
    assert memory_limit_hit([str(calm)]) is None
    assert memory_limit_hit([]) is None
    killed_by_oom = {"signal": 9, "memory_limit_hit": 32 << 20}  # as the wrapper records it
    state, message, reason, _ = exit_outcome(killed_by_oom, killed=False)
    assert (state, reason) == (common_pb2.TASK_FAILED, "REASON_CONTAINER_LIMITATION_MEMORY")
    assert message.startswith("memory limit of 32 MB exceeded")
    # The agent's own kill is a kill, whatever else happened.
    assert exit_outcome(killed_by_oom, killed=True)[0] == common_pb2.TASK_KILLED
    assert exit_outcome({"signal": 9}, killed=False)[2] == "REASON_COMMAND_EXITED"


def test_a_run_whose_wrapper_never_started_fails_on_recovery_and_its_cgroups_go(tmp_path):
    """The agent stopped between writing a run's record (which names its cgroups) and its
    wrapper starting: the restarted agent fails the task and removes those cgroups (an empty
    directory stands in for one here), which no wrapper ever will."""
    from agora.agent.checkpoint import TaskRecord, WorkDir, b64
    from agora.agent.isolation import Isolator
    from agora.agent.task_manager import TaskManager

    work = WorkDir(tmp_path / "work")
    cgroup = tmp_path / "cgroup" / "run-1"
    cgroup.mkdir(parents=True)
    task = common_pb2.TaskInfo(task_id="t1", name="t1")
    record = TaskRecord(
        run_id="run-1",
        framework_id="fw",
        task=b64(task.SerializeToString()),
        sandbox=str(work.new_sandbox("fw", "t1")),
        state=common_pb2.TASK_STARTING,
        cgroups=[str(cgroup)],
    )
    work.prepare_run(record)
    emitted: list[common_pb2.TaskStatus] = []
    manager = TaskManager(
        work,
        lambda framework_id, status: emitted.append(status),
        lambda: "agent-1",
        isolator=Isolator(enabled=False),
        use_launcher=False,
    )
    manager.recover(lambda framework_id, task_id: [])
    assert [(s.task_id, s.state, s.reason) for s in emitted] == [
        ("t1", common_pb2.TASK_FAILED, "REASON_AGENT_RESTARTED")
    ]
    assert not cgroup.exists()


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("port", 70000, "port must be a whole number between 0 and 65535, got 70000"),
        ("metrics_port", -1, "metrics_port must be a whole number between 0 and 65535"),
        ("heartbeat_interval_seconds", 0.0, "heartbeat_interval_seconds must be a positive"),
        ("usage_interval_seconds", float("nan"), "usage_interval_seconds must be a positive"),
        ("gc_delay_seconds", -1.0, "gc_delay_seconds must be 0 or more seconds, got -1.0"),
        ("gc_disk_headroom", 1.5, "gc_disk_headroom must be a fraction between 0 and 1"),
        ("max_completed_tasks", 0, "max_completed_tasks must be at least 1, got 0"),
        ("task_pids_max", 10.5, "task_pids_max must be a whole number"),
        ("port", "5051", "port must be a whole number between 0 and 65535, got '5051'"),
        ("reconnect_backoff_max_seconds", 0.1, "must not be below reconnect_backoff_initial"),
        ("update_backoff_max_seconds", 0.1, "must not be below update_backoff_initial"),
    ],
)
def test_agent_config_names_a_bad_field_and_the_daemon_refuses_it(tmp_path, field, value, says):
    from agora.agent import AgentConfig, AgentDaemon

    config = AgentConfig(master="127.0.0.1:1", work_dir=tmp_path, **{field: value})
    with pytest.raises(ValueError, match=says):
        config.validate()
    with pytest.raises(ValueError, match=says):
        AgentDaemon(config)
    AgentConfig(master="127.0.0.1:1", work_dir=tmp_path).validate()  # the defaults are fine
