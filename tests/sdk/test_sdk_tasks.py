"""Task helpers: ids, commands and readable status lines."""

import pytest

from agora.frameworks.sdk import (
    argv_command,
    as_command,
    describe_status,
    is_terminal,
    new_task_id,
    shell_command,
    state_name,
)
from agora.v1 import common_pb2


def test_task_ids_are_unique_and_safe_in_file_names():
    ids = {new_task_id("hello world/1") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("hello-world-1-") for i in ids)
    assert new_task_id("///").startswith("task-")


def test_shell_and_argv_commands():
    shell = shell_command("echo hello from task 3", env={"A": "1"})
    assert shell.shell == "echo hello from task 3" and not shell.argv
    assert shell.environment["A"] == "1"
    argv = argv_command(["sleep", "1"])
    assert list(argv.argv) == ["sleep", "1"] and not argv.shell
    assert as_command("true").shell == "true"
    assert list(as_command(("ls", "-l")).argv) == ["ls", "-l"]
    copied = as_command(argv, env={"B": "2"})
    assert copied.environment["B"] == "2" and "B" not in argv.environment


@pytest.mark.parametrize("bad", ["", "   ", [], [""]])
def test_empty_commands_are_refused(bad):
    with pytest.raises(ValueError):
        as_command(bad)


def test_argv_refuses_a_string():
    with pytest.raises(TypeError, match="shell_command"):
        argv_command("echo hi")


def test_states_read_like_mesos():
    assert state_name(common_pb2.TASK_FINISHED) == "FINISHED"
    assert is_terminal(common_pb2.TASK_LOST) and not is_terminal(common_pb2.TASK_RUNNING)
    status = common_pb2.TaskStatus(
        task_id="t-1",
        state=common_pb2.TASK_FAILED,
        agent_id="agent-1",
        message="exited with code 3",
    )
    assert describe_status(status) == "t-1 FAILED on agent-1: exited with code 3"
