"""Whether an agent runs tasks in namespaces of their own: on where the host allows it, refused
at start when asked for and impossible, off when told (agent/task_namespaces.py)."""

from __future__ import annotations

import pytest

from agora.agent.task_namespaces import Decision, decide, has_capability

ALL = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")


def _decide(asked, root=True, sys_admin=True, kinds=ALL, wrapper=True):
    return decide(
        asked, root=root, sys_admin=sys_admin, kernel_kinds=kinds, c_wrapper=lambda: wrapper
    )


def test_on_by_default_where_the_host_allows_it():
    assert _decide(None) == Decision(True)
    assert _decide(True) == Decision(True)


def test_the_operator_may_turn_them_off():
    assert _decide(False) == Decision(False, "--no-task-namespaces")


@pytest.mark.parametrize(
    ("host", "missing"),
    [
        ({"root": False}, "needs root"),
        ({"sys_admin": False}, "needs CAP_SYS_ADMIN"),
        ({"kinds": ("mnt", "net", "uts")}, "needs the kernel's pid, ipc namespaces"),
        ({"wrapper": False}, "needs the C task wrapper"),
    ],
)
def test_a_missing_part_turns_the_default_off_and_refuses_an_explicit_ask(host, missing):
    off = _decide(None, **host)
    assert not off.on and off.why_not.startswith(missing)
    with pytest.raises(ValueError, match="--no-task-namespaces") as refused:
        _decide(True, **host)
    assert str(refused.value).startswith(f"--task-namespaces {missing}")


def test_the_wrapper_is_looked_for_only_when_nothing_else_is_missing():
    asked = []

    def wrapper() -> bool:
        asked.append(1)
        return True

    decide(None, root=False, sys_admin=False, kernel_kinds=ALL, c_wrapper=wrapper)
    decide(False, root=True, sys_admin=True, kernel_kinds=ALL, c_wrapper=wrapper)
    assert asked == []


def test_capabilities_are_read_from_the_status_file(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t0000000000200000\n")
    assert has_capability(21, str(status))
    assert not has_capability(0, str(status))
    assert not has_capability(21, str(tmp_path / "missing"))


def test_a_host_that_refuses_the_trial_run_turns_them_off_saying_why():
    """Root with CAP_SYS_ADMIN may still be refused a mount (AppArmor, a container): the
    agent's trial run of `true` decides, and its error is the reason."""
    refused = "cannot set up the task's namespaces (--task-namespaces): Permission denied"
    off = decide(None, True, True, ALL, lambda: True, trial=lambda: refused)
    assert off == Decision(False, f"cannot be made here: {refused}")
    with pytest.raises(ValueError, match="--task-namespaces cannot be made here: cannot set up"):
        decide(True, True, True, ALL, lambda: True, trial=lambda: refused)
    assert decide(None, True, True, ALL, lambda: True, trial=lambda: "").on


def test_the_trial_runs_true_in_namespaces_through_the_wrapper(tmp_path):
    from agora.agent import native_wrapper
    from agora.agent.task_namespaces import trial

    (tmp_path / "sandboxes").mkdir()
    wrapper = native_wrapper.wrapper_path()
    assert wrapper is not None
    assert trial(wrapper, tmp_path / "sandboxes", tmp_path / "trial") == ""
    assert trial("/bin/false", tmp_path / "sandboxes", tmp_path / "trial") == "exit 1"
    assert list((tmp_path / "sandboxes").iterdir()) == [] and not (tmp_path / "trial").exists()
