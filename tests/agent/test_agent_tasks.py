"""The agent against a fake master over real gRPC on loopback, running real processes."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import grpc
import psutil
import pytest
from agent_fake_master import FakeMaster, MasterMessage, shell_task
from harness import command_pid, eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources, attributes_from_proto
from agora.common.rpc import insecure_channel
from agora.v1 import agent_pb2, agent_pb2_grpc, common_pb2

FW = "fw-1"
S = common_pb2


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3)
    await m.start()
    yield m
    await m.stop()


class Agents:
    """Starts agent daemons on a work dir; at the end stops them and kills their tasks."""

    def __init__(self, master: FakeMaster, root: Path) -> None:
        self.master = master
        self.root = root
        self.running: list[AgentDaemon] = []

    def config(self, **overrides) -> AgentConfig:
        values = dict(
            master=self.master.address,
            port=0,
            work_dir=self.root / "agent",
            resources=Resources.parse("cpus:2;mem:1024;disk:2048;ports:[31000-31009]"),
            attributes={"rack": "r1", "zone": "z1"},
            hostname="host-a",
            reconnect_backoff_initial_seconds=0.05,
            reconnect_backoff_max_seconds=0.5,
            update_backoff_initial_seconds=0.2,
            update_backoff_max_seconds=1.0,
        )
        values.update(overrides)
        return AgentConfig(**values)

    async def start(self, **overrides) -> AgentDaemon:
        daemon = AgentDaemon(self.config(**overrides))
        await daemon.start()
        self.running.append(daemon)
        return daemon

    async def stop(self, daemon: AgentDaemon, kill_tasks: bool = False) -> None:
        """By default as on SIGTERM of `agora agent`: the tasks keep running."""
        await daemon.stop(kill_tasks=kill_tasks)
        self.running.remove(daemon)


@pytest.fixture
async def agents(master, tmp_path):
    helper = Agents(master, tmp_path)
    yield helper
    for daemon in list(helper.running):
        await helper.stop(daemon, kill_tasks=True)


async def registered(master: FakeMaster, count: int = 1):
    await eventually_async(
        lambda: len(master.registrations) >= count and master.connected,
        timeout=20,
        message=f"{count} registration(s)",
    )
    return master.registrations[count - 1]


async def terminal(master: FakeMaster, task_id: str) -> S.TaskStatus:
    return await eventually_async(
        lambda: master.terminal(task_id), timeout=30, message=f"terminal update of {task_id}"
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# The protocol as the master sees it (registration, updates resent until acknowledged, kills,
# re-registration) is checked against this agent and the emulated one alike, by the same tests:
# tests/experiments/test_emulated_agent_protocol.py. Here: what only the real agent does.


async def test_registers_with_resources_attributes_and_address(master, agents):
    daemon = await agents.start()
    reg = await registered(master)
    assert reg.info.agent_id == ""
    assert Resources.from_proto(reg.info.resources) == daemon.resources
    assert Resources.from_proto(reg.info.resources).scalar("cpus") == 2
    assert attributes_from_proto(reg.info.attributes) == {"rack": "r1", "zone": "z1"}
    assert reg.info.hostname == "host-a"
    assert reg.info.address == daemon.address
    assert list(reg.tasks) == []
    await eventually_async(lambda: master.heartbeats >= 1, message="a heartbeat")


async def test_echo_runs_through_starting_running_finished_and_serves_stdout(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("t1", "echo hello; echo oops >&2"))
    final = await terminal(master, "t1")
    assert master.states("t1") == [S.TASK_STARTING, S.TASK_RUNNING, S.TASK_FINISHED]
    assert final.exit_code == 0 and final.message == "exited with code 0"
    updates = [u for u in master.updates if u.task_id == "t1"]
    assert len({u.uuid for u in updates}) == 3 and all(len(u.uuid) == 16 for u in updates)
    assert all(
        u.agent_id == "agent-1"
        and u.framework_id == FW
        and u.source == S.TaskStatus.SOURCE_AGENT
        and u.timestamp > 0
        for u in updates
    )

    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        out = await stub.ReadFile(agent_pb2.ReadFileRequest(task_id="t1", path="stdout"))
        assert out.data == b"hello\n" and out.size == 6
        err = await stub.ReadFile(
            agent_pb2.ReadFileRequest(framework_id=FW, task_id="t1", path="stderr")
        )
        assert err.data == b"oops\n"
        tail = await stub.ReadFile(
            agent_pb2.ReadFileRequest(task_id="t1", path="stdout", offset=-3)
        )
        assert tail.data == b"lo\n" and tail.offset == 3
        chunks = [
            c async for c in stub.FollowFile(agent_pb2.ReadFileRequest(task_id="t1", path="stdout"))
        ]
        assert b"".join(c.data for c in chunks) == b"hello\n"
        listing = await stub.ListFiles(agent_pb2.ListFilesRequest(task_id="t1"))
        assert {f.path for f in listing.files} == {"stdout", "stderr"}
        # Listed with its final state; nothing left to resend once acknowledged.
        task = await eventually_async(
            lambda: _acknowledged(stub, "t1"), message="every update acknowledged"
        )
        assert (task.framework_id, task.state) == (FW, S.TASK_FINISHED)
        assert Path(task.sandbox).parts[-3:] == ("sandboxes", FW, "t1")


async def _acknowledged(stub, task_id: str):
    reply = await stub.ListTasks(agent_pb2.ListAgentTasksRequest())
    task = next((t for t in reply.tasks if t.task.task_id == task_id), None)
    return task if task is not None and task.unacknowledged_updates == 0 else None


async def test_list_tasks_shows_running_ones_with_sandbox_and_pid(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("lister", "sleep 100"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("lister"))
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        tasks = (await stub.ListTasks(agent_pb2.ListAgentTasksRequest())).tasks
    assert [(t.framework_id, t.task.task_id, t.state) for t in tasks] == [
        (FW, "lister", S.TASK_RUNNING)
    ]
    assert Path(tasks[0].sandbox).parts[-3:] == ("sandboxes", FW, "lister")
    assert os.getpgid(tasks[0].pid) == tasks[0].pid  # the leader of the task's group


async def test_follow_streams_output_while_the_task_runs(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(
        FW, shell_task("slow", "echo one; while [ ! -e go ]; do sleep 0.05; done; echo two")
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("slow"))
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        stream = stub.FollowFile(agent_pb2.ReadFileRequest(task_id="slow", path="stdout"))
        first = await stream.read()
        assert first.data == b"one\n"
        sandbox = Path(daemon.tasks.find(FW, "slow").sandbox)
        (sandbox / "go").touch()
        rest = b""
        while (chunk := await stream.read()) is not grpc.aio.EOF:
            rest += chunk.data
        assert rest == b"two\n"
    assert (await terminal(master, "slow")).state == S.TASK_FINISHED


async def test_nonzero_exit_fails_with_the_exit_code(master, agents):
    await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("t3", "exit 3"))
    final = await terminal(master, "t3")
    assert final.state == S.TASK_FAILED
    assert final.exit_code == 3 and "exited with code 3" in final.message


async def test_command_not_found_is_a_launch_error(master, agents):
    await agents.start()
    await registered(master)
    task = S.TaskInfo(task_id="nope", command=S.CommandInfo(argv=["/no/such/binary", "x"]))
    master.run_task(FW, task)
    final = await terminal(master, "nope")
    assert final.state == S.TASK_ERROR
    assert "/no/such/binary" in final.message and "not found" in final.message
    # A task with no command at all is refused before anything runs.
    master.run_task(FW, S.TaskInfo(task_id="empty"))
    final = await terminal(master, "empty")
    assert final.state == S.TASK_ERROR and "no command" in final.message
    # A task id that would leave the sandboxes directory is refused too.
    master.run_task(FW, shell_task("../escape", "true"))
    final = await terminal(master, "../escape")
    assert final.state == S.TASK_ERROR and "directory name" in final.message


async def test_kill_takes_down_the_whole_process_group(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("k", "sleep 100 & sleep 100", grace=0.5))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("k"))
    pgid = daemon.tasks.find(FW, "k").wrapper.task_pid
    members = await eventually_async(
        lambda: (
            [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
            if len([p for p in psutil.process_iter() if _pgid(p.pid) == pgid]) >= 3
            else None
        ),
        message="sh and both sleeps",
    )
    master.kill_task(FW, "k")
    final = await terminal(master, "k")
    assert final.state == S.TASK_KILLED
    await eventually_async(
        lambda: not any(alive(pid) for pid in members), message="every process of the group gone"
    )
    await eventually_async(lambda: not group_alive(pgid), message="process group gone")


async def test_kill_escalates_to_sigkill_after_the_grace_period(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(
        FW, shell_task("stubborn", "trap '' TERM; echo ready; sleep 100; sleep 100", grace=0.3)
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("stubborn"))
    stdout = Path(daemon.tasks.find(FW, "stubborn").sandbox) / "stdout"
    await eventually_async(lambda: stdout.read_text() == "ready\n")
    pgid = daemon.tasks.find(FW, "stubborn").wrapper.task_pid
    master.kill_task(FW, "stubborn")
    final = await terminal(master, "stubborn")
    assert final.state == S.TASK_KILLED
    await eventually_async(lambda: not group_alive(pgid), message="process group gone")


async def test_environment_has_ports_sandbox_and_command_env(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(
        FW,
        shell_task(
            "env",
            'echo "$PORT0 $PORT1 $PORT $AGORA_TASK_ID $AGORA_SANDBOX $GREETING"; pwd',
            ports=[(31002, 31003)],
            env={"GREETING": "hi"},
        ),
    )
    assert (await terminal(master, "env")).state == S.TASK_FINISHED
    sandbox = daemon.tasks.find(FW, "env").sandbox
    assert sandbox == Path(daemon.work.root) / "sandboxes" / FW / "env"
    lines = (sandbox / "stdout").read_text().splitlines()
    assert lines == [f"31002 31003 31002 env {sandbox} hi", str(sandbox.resolve())]


async def test_same_task_id_twice_gets_a_fresh_sandbox(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("again", "echo first"))
    await terminal(master, "again")
    first = daemon.tasks.find(FW, "again").sandbox
    master.updates.clear()
    master.run_task(FW, shell_task("again", "echo second"))
    await terminal(master, "again")
    second = daemon.tasks.find(FW, "again").sandbox
    assert first != second
    assert (first / "stdout").read_text() == "first\n"
    assert (second / "stdout").read_text() == "second\n"


async def test_resends_at_once_after_reconnecting(master, agents):
    master.auto_ack = False
    await agents.start(update_backoff_initial_seconds=30.0, update_backoff_max_seconds=30.0)
    await registered(master)
    master.run_task(FW, shell_task("x", "true"))
    await eventually_async(lambda: master.states("x") == [S.TASK_STARTING])
    master.disconnect()
    reg = await registered(master, 2)
    assert reg.info.agent_id == "agent-1"
    assert [(t.task.task_id, t.framework_id) for t in reg.tasks] == [("x", FW)]
    # With a 30 s backoff only the re-registration explains a second STARTING.
    await eventually_async(lambda: master.states("x") == [S.TASK_STARTING] * 2)


async def test_restart_keeps_id_recovers_running_task_and_sends_final_once(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("long", "while [ ! -e go ]; do sleep 0.05; done; exit 0"))
    await eventually_async(lambda: master.states("long") == [S.TASK_STARTING, S.TASK_RUNNING])
    sandbox = daemon.tasks.find(FW, "long").sandbox
    pid = daemon.tasks.find(FW, "long").wrapper.task_pid
    await agents.stop(daemon)  # the task keeps running without its agent
    assert alive(pid)

    daemon = await agents.start()
    reg = await registered(master, 2)
    assert reg.info.agent_id == "agent-1"
    assert [(t.task.task_id, t.state) for t in reg.tasks] == [("long", S.TASK_RUNNING)]
    (sandbox / "go").touch()
    final = await terminal(master, "long")
    assert final.state == S.TASK_FINISHED
    # acknowledged (auto_ack): the final update is not sent again, and the task is history
    await eventually_async(lambda: not daemon.tasks.active_runs(), message="task completed")
    beats = master.heartbeats
    await eventually_async(lambda: master.heartbeats >= beats + 6, message="heartbeats")
    assert master.states("long").count(S.TASK_FINISHED) == 1

    await agents.stop(daemon)
    daemon = await agents.start()
    reg = await registered(master, 3)
    assert reg.info.agent_id == "agent-1" and list(reg.tasks) == []


async def test_task_that_ended_while_the_agent_was_down_is_reported(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("quick", "while [ ! -e go ]; do sleep 0.05; done; exit 4"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("quick"))
    run = daemon.tasks.find(FW, "quick")
    await agents.stop(daemon)
    (run.sandbox / "go").touch()
    await eventually_async(lambda: not run.wrapper.alive(), message="task ended")

    await agents.start()
    final = await terminal(master, "quick")
    assert final.state == S.TASK_FAILED and final.exit_code == 4
    assert master.states("quick").count(S.TASK_FAILED) == 1


async def test_shutdown_kills_tasks_and_registers_afresh(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("doomed", "sleep 100"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("doomed"))
    pgid = daemon.tasks.find(FW, "doomed").wrapper.task_pid
    # The master forgets the agent, then sees it come back with its old id.
    master.removed.add("agent-1")
    master.disconnect()
    reg = await registered(master, 3)
    assert master.registrations[1].info.agent_id == "agent-1"
    assert reg.info.agent_id == "" and list(reg.tasks) == []
    await eventually_async(lambda: not group_alive(pgid), message="process group gone")
    assert daemon.agent_id == "agent-2"
    assert not (daemon.work.meta / "agent_id").read_text().strip() == "agent-1"
    assert S.TASK_KILLED not in master.states("doomed")


async def test_sandbox_escapes_and_unknown_tasks_are_refused(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("files", "echo hi > note"))
    await terminal(master, "files")
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        for path in ("../../../etc/passwd", "/etc/passwd", "sub/../../x"):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.ReadFile(agent_pb2.ReadFileRequest(task_id="files", path=path))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, path
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.ListFiles(agent_pb2.ListFilesRequest(task_id="files", path=".."))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.ReadFile(agent_pb2.ReadFileRequest(task_id="nobody", path="stdout"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.ReadFile(agent_pb2.ReadFileRequest(task_id="files", path="missing"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        note = await stub.ReadFile(agent_pb2.ReadFileRequest(task_id="files", path="note"))
        assert note.data == b"hi\n"


FLIP_DIRECTORY_AND_SYMLINK = """
import os, time
os.mkdir("real"); open("real/passwd", "w").write("inside"); os.symlink("/etc", "link")
print("flipping", flush=True)
while True:
    for source in ("real", "link"):
        os.rename(source, "d"); time.sleep(0.0001); os.rename("d", source)
"""


async def test_a_task_swapping_a_directory_for_a_symlink_cannot_lead_reads_out(master, agents):
    # The race a check-then-open loses: the task flips sandbox/d between a real directory and a
    # symlink to /etc while a client reads d/passwd through the agent.
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("flip", f"python3 -c '{FLIP_DIRECTORY_AND_SYMLINK}'"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("flip"))
    secret = Path("/etc/passwd").read_bytes()
    codes: dict[str, int] = {}
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        await eventually_async(
            lambda: b"flipping" in (daemon.tasks.find(FW, "flip").sandbox / "stdout").read_bytes()
        )
        for _ in range(500):
            try:
                reply = await stub.ReadFile(
                    agent_pb2.ReadFileRequest(task_id="flip", path="d/passwd")
                )
            except grpc.aio.AioRpcError as e:
                codes[e.code().name] = codes.get(e.code().name, 0) + 1
                continue
            assert reply.data != secret
            assert reply.data == b"inside"
            codes["OK"] = codes.get("OK", 0) + 1
    master.kill_task(FW, "flip")
    await terminal(master, "flip")
    # Refusals are INVALID_ARGUMENT (leads outside) or NOT_FOUND (caught mid-rename), never
    # UNKNOWN; and the race ran: some reads landed inside.
    assert set(codes) <= {"OK", "INVALID_ARGUMENT", "NOT_FOUND"}, codes
    assert codes.get("OK", 0) > 0, codes


async def test_a_file_name_that_is_not_utf8_is_listed(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("bytes", "touch \"$(printf 'x\\377')\""))
    await terminal(master, "bytes")
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        listing = await stub.ListFiles(agent_pb2.ListFilesRequest(task_id="bytes"))
        assert "x\\xff" in [f.path for f in listing.files]


async def test_serves_health_and_reflection(master, agents):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    daemon = await agents.start()
    async with insecure_channel(daemon.address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="agora.v1.Agent")
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def group_alive(pgid: int) -> bool:
    """Any live member left in the group (zombies awaiting their reaper do not count)."""
    return any(_pgid(p.pid) == pgid and alive(p.pid) for p in psutil.process_iter())


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


async def test_shutdown_framework_kills_only_its_tasks(master, agents):
    await agents.start()
    await registered(master)
    master.run_task("fw-a", shell_task("a1", "sleep 100"))
    master.run_task("fw-a", shell_task("a2", "sleep 100"))
    master.run_task("fw-b", shell_task("b1", "while [ ! -e go ]; do sleep 0.05; done"))
    for task_id in ("a1", "a2", "b1"):
        await eventually_async(lambda t=task_id: S.TASK_RUNNING in master.states(t))
    master.send(
        MasterMessage(shutdown_framework=MasterMessage.ShutdownFramework(framework_id="fw-a"))
    )
    for task_id in ("a1", "a2"):
        assert (await terminal(master, task_id)).state == S.TASK_KILLED
    assert master.terminal("b1") is None


async def test_kill_while_launching_still_kills(master, agents):
    daemon = await agents.start()
    await registered(master)
    master.run_task(FW, shell_task("early", "sleep 100"))
    master.kill_task(FW, "early")  # queued right behind RunTask: arrives mid-launch
    final = await terminal(master, "early")
    assert final.state == S.TASK_KILLED
    run = daemon.tasks.find(FW, "early")
    if run.wrapper is not None:
        await eventually_async(lambda: not group_alive(run.wrapper.task_pid))


async def test_a_second_agent_on_the_same_work_dir_is_refused(master, agents):
    first = await agents.start()
    with pytest.raises(OSError, match="in use by another agent"):
        await agents.start()
    await agents.stop(first)
    await agents.start()  # released on stop


async def test_advertised_address_and_detected_resources(master, agents):
    daemon = await agents.start(advertise_ip="10.1.2.3", resources=None, hostname=None)
    reg = await registered(master)
    assert reg.info.address == f"10.1.2.3:{daemon.port}"
    assert reg.info.hostname  # this machine's name
    detected = Resources.from_proto(reg.info.resources)
    assert detected.scalar("cpus") >= 1 and detected.scalar("mem") > 0
    assert detected.port_ranges() == ((31000, 32000),)


async def test_only_the_newest_completed_runs_are_kept(master, agents):
    """Completed runs beyond the history limit (--max-completed-tasks) lose their run dir (not
    their sandbox)."""
    daemon = await agents.start(max_completed_tasks=2)
    await registered(master)
    names = [f"h{i}" for i in range(4)]
    for name in names:
        master.run_task(FW, shell_task(name, "true"))
        await terminal(master, name)
        # Acknowledged (the fake master acks every update): the run is completed.
        await eventually_async(lambda n=name: daemon.tasks.find(FW, n).record.completed)
    runs = {r.task.task_id: r for r in daemon.tasks.runs()}
    assert sorted(runs) == ["h2", "h3"]
    run_dirs = sorted(p.name for p in daemon.work.runs.iterdir())
    assert run_dirs == sorted(r.record.run_id for r in runs.values())
    sandboxes = sorted(p.name for p in (daemon.work.sandboxes / FW).iterdir())
    assert sandboxes == names


# --- task users -------------------------------------------------------------------------------

NOBODY = pwd.getpwnam("nobody")


def _proc_uids(pid: int) -> tuple[int, int]:
    """(real uid, real gid) of a live process, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0])


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs an agent running as root")
async def test_a_task_runs_as_its_user_and_cannot_read_other_sandboxes_or_the_work_dir(
    master, agents
):
    daemon = await agents.start()
    await registered(master)
    # A task of the agent's own user (root here) leaves a secret in its sandbox.
    master.run_task(FW, shell_task("owner", "echo s3cret > secret"))
    await terminal(master, "owner")
    owner_sandbox = daemon.tasks.find(FW, "owner").sandbox
    probe = (
        "id -u; id -g; echo HOME=$HOME USER=$USER; "
        f"cat {owner_sandbox}/secret || echo no-secret; "
        f"ls {daemon.work.meta} || echo no-meta; "
        f"ls {daemon.work.sandboxes} || echo no-listing; "
        "echo mine > mine; sleep 30"
    )
    task = shell_task("as-nobody", probe)
    task.command.user = "nobody"
    master.run_task(FW, task, framework_user="root")  # the command's user wins
    await eventually_async(lambda: S.TASK_RUNNING in master.states("as-nobody"))
    run = daemon.tasks.find(FW, "as-nobody")
    assert _proc_uids(command_pid(run.wrapper.task_pid)) == (NOBODY.pw_uid, NOBODY.pw_gid)
    stdout = run.sandbox / "stdout"
    await eventually_async(lambda: "no-listing" in stdout.read_text(), message=stdout)
    out = stdout.read_text().splitlines()
    assert out[:3] == [str(NOBODY.pw_uid), str(NOBODY.pw_gid), f"HOME={NOBODY.pw_dir} USER=nobody"]
    assert "s3cret" not in stdout.read_text() and "no-secret" in out
    assert "no-meta" in out  # the agent's records (task environments) are not the task's
    # The sandbox and what the task writes in it are the task user's, readable by no one else.
    st = run.sandbox.stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (NOBODY.pw_uid, "0o700")
    assert (run.sandbox / "mine").stat().st_uid == NOBODY.pw_uid
    master.kill_task(FW, "as-nobody")
    await terminal(master, "as-nobody")


async def test_the_framework_user_applies_and_an_unknown_user_is_refused(master, agents):
    daemon = await agents.start()
    await registered(master)
    me = pwd.getpwuid(os.geteuid()).pw_name
    master.run_task(FW, shell_task("mine", "id -un"), framework_user=me)
    assert (await terminal(master, "mine")).state == S.TASK_FINISHED
    assert (daemon.tasks.find(FW, "mine").sandbox / "stdout").read_text().strip() == me
    master.run_task(FW, shell_task("ghost-user", "true"), framework_user="no-such-user-xyz")
    status = await terminal(master, "ghost-user")
    assert status.state == S.TASK_ERROR
    assert "no Unix user 'no-such-user-xyz'" in status.message


# --- usage ------------------------------------------------------------------------------------

BUSY_TASK = """
import time
block = bytearray(60 * 1024 * 1024)
for i in range(0, len(block), 4096): block[i] = 1
open("data", "wb").write(b"x" * (2 * 1024 * 1024))
end = time.process_time() + 0.3
while time.process_time() < end: pass
print("ready", flush=True)
time.sleep(60)
"""


async def test_usage_reports_cpu_memory_and_disk_of_running_tasks(master, agents):
    daemon = await agents.start()
    await registered(master)
    task = shell_task("busy", f"python3 -c '{BUSY_TASK}'")
    task.resources[1].scalar = 256  # mem, MB
    master.run_task(FW, task)
    master.run_task(FW, shell_task("idle", "sleep 60"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("idle"))
    stdout = lambda: (daemon.tasks.find(FW, "busy").sandbox / "stdout").read_text()  # noqa: E731
    await eventually_async(lambda: "ready" in stdout(), message="the busy task to warm up")
    async with insecure_channel(daemon.address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        every = await stub.GetUsage(agent_pb2.GetUsageRequest())
        assert {u.task_id for u in every.usage} == {"busy", "idle"}
        [busy] = (await stub.GetUsage(agent_pb2.GetUsageRequest(task_id="busy"))).usage
        assert busy.framework_id == FW and busy.source in ("cgroup", "proc")
        assert busy.cpu_user_seconds + busy.cpu_system_seconds >= 0.25
        assert 55 * 2**20 <= busy.mem_rss_bytes <= 256 * 2**20
        assert busy.mem_limit_bytes == 256 * 2**20 and busy.cpus_allocated == pytest.approx(0.1)
        assert busy.disk_used_bytes >= 2 * 2**20 and busy.timestamp > 0
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.GetUsage(agent_pb2.GetUsageRequest(task_id="nothing"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    for task_id in ("busy", "idle"):
        master.kill_task(FW, task_id)
        await terminal(master, task_id)


# --- metrics ----------------------------------------------------------------------------------


async def test_a_real_prometheus_scrapes_the_agents_tasks_and_usage(master, agents, tmp_path):
    from prometheus import Prometheus

    daemon = await agents.start(metrics_port=0, usage_interval_seconds=0.2)
    await registered(master)
    for task_id in ("a", "b"):
        master.run_task(FW, shell_task(task_id, "sleep 60"))
    master.run_task(FW, shell_task("done", "true"))
    await terminal(master, "done")
    await eventually_async(lambda: master.states("b").count(S.TASK_RUNNING) == 1)
    prometheus = Prometheus(tmp_path / "prom", {"agent": [daemon.metrics_address]}).start()
    try:

        def value(promql: str) -> float | None:
            result = prometheus.query(promql)
            return result[0][1] if result else None

        await eventually_async(
            lambda: value('agora_agent_tasks{state="TASK_RUNNING"}') == 2, timeout=20
        )
        assert value("agora_agent_registered") == 1
        assert value('agora_agent_tasks_ended_total{state="TASK_FINISHED"}') == 1
        assert value("agora_agent_task_launch_seconds_count") == 3
        await eventually_async(
            lambda: value('agora_agent_task_memory_rss_bytes{task_id="a"}') not in (None, 0.0),
            timeout=20,
        )
        assert value('agora_agent_task_memory_limit_bytes{task_id="a"}') == 32 * 2**20
    finally:
        prometheus.stop()
    for task_id in ("a", "b"):
        master.kill_task(FW, task_id)
        await terminal(master, task_id)


# --- sandbox watch: disk limits and log rotation ----------------------------------------------


async def test_a_task_over_its_disk_allocation_fails_saying_so(master, agents):
    await agents.start(sandbox_watch_interval_seconds=0.2)
    await registered(master)
    hog = shell_task("hog", "head -c 3000000 /dev/zero > big; sleep 60")
    hog.resources.append(
        common_pb2.Resource(name="disk", type=common_pb2.Resource.SCALAR, scalar=1)
    )
    master.run_task(FW, hog)
    fine = shell_task("fine", "head -c 100000 /dev/zero > small; sleep 60")
    fine.resources.append(
        common_pb2.Resource(name="disk", type=common_pb2.Resource.SCALAR, scalar=10)
    )
    master.run_task(FW, fine)
    status = await terminal(master, "hog")
    assert status.state == S.TASK_FAILED
    assert status.reason == "REASON_CONTAINER_LIMITATION_DISK"
    assert "disk limit of 1 MB exceeded" in status.message
    assert S.TASK_RUNNING in master.states("fine") and master.terminal("fine") is None
    master.kill_task(FW, "fine")
    await terminal(master, "fine")


async def test_a_task_writing_far_past_its_disk_is_stopped_soon_after_crossing_it(master, agents):
    """Issue 35: 512 MB into a 32 MB allocation, 8 MB a tenth of a second. The sandbox watch's
    own interval (15 s) would let it all through; the disk check (every second) stops it with
    a small part written."""
    daemon = await agents.start()  # the default intervals
    await registered(master)
    writer = shell_task(
        "writer",
        "i=0; while [ $i -lt 64 ]; do head -c 8388608 /dev/zero >> big; sleep 0.1; "
        "i=$((i+1)); done; sleep 60",
    )
    writer.resources.append(
        common_pb2.Resource(name="disk", type=common_pb2.Resource.SCALAR, scalar=32)
    )
    master.run_task(FW, writer)
    status = await terminal(master, "writer")
    assert status.state == S.TASK_FAILED
    assert status.reason == "REASON_CONTAINER_LIMITATION_DISK"
    assert "disk limit of 32 MB exceeded" in status.message
    big = next(daemon.work.root.glob("sandboxes/*/writer/big"))
    assert big.stat().st_size < 256 * 1024 * 1024, "stopped long before it wrote it all"


async def test_task_logs_are_rotated_past_the_size_the_operator_sets(master, agents):
    daemon = await agents.start(sandbox_watch_interval_seconds=0.2, max_log_bytes=100_000)
    await registered(master)
    master.run_task(FW, shell_task("chatty", "head -c 300000 /dev/zero | tr '\\\\0' x; sleep 60"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("chatty"))
    sandbox = daemon.tasks.find(FW, "chatty").sandbox
    await eventually_async(lambda: (sandbox / "stdout.1").exists(), message="a rotation")
    assert (sandbox / "stdout.1").stat().st_size >= 100_000
    assert (sandbox / "stdout").stat().st_size < 300_000
    master.kill_task(FW, "chatty")
    await terminal(master, "chatty")
