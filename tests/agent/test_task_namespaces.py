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


# x86_64's numbers for the calls task_wrapper.c's filter refuses (asm/unistd_64.h).
X86_64_REFUSED = {
    "syslog": 103, "pivot_root": 155, "acct": 163, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "init_module": 175, "delete_module": 176, "kexec_load": 246,
    "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "open_by_handle_at": 304, "setns": 308, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}  # fmt: skip
AUDIT_ARCH_X86_64, AUDIT_ARCH_I386 = 0xC000003E, 0x40000003
ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1


def _run_filter(program: list[tuple[int, int, int, int]], arch: int, nr: int) -> int:
    """Classic BPF as the kernel runs a seccomp filter, for the instructions the wrapper uses:
    what the filter returns for call `nr` of `arch`."""
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = program[pc]  # an IndexError: a jump out of the filter
        if code == 0x20:  # LD W ABS: seccomp_data's nr (0) or arch (4)
            acc = {0: nr, 4: arch}[k]
            pc += 1
        elif code in (0x15, 0x35):  # JEQ K, JGE K
            taken = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:  # RET K
            return k
        else:
            raise AssertionError(f"instruction {code:#x} at {pc}")


def test_the_seccomp_filter_refuses_exactly_its_calls():
    """The wrapper's filter is a search by halves (task_wrapper.c, search_calls): run as the
    kernel runs it, it refuses every listed call and no other, and any call of i386 or x32."""
    import platform
    import struct
    import subprocess

    from agora.agent import native_wrapper

    if platform.machine() != "x86_64":
        pytest.skip("the call numbers below are x86_64's")
    wrapper = native_wrapper.wrapper_path()
    assert wrapper is not None
    raw = subprocess.run([wrapper, "--seccomp-filter"], capture_output=True, check=True).stdout
    program = list(struct.iter_unpack("=HBBI", raw))
    refused = {nr for nr in range(1024) if _run_filter(program, AUDIT_ARCH_X86_64, nr) == EPERM}
    allowed = {nr for nr in range(1024) if _run_filter(program, AUDIT_ARCH_X86_64, nr) == ALLOW}
    assert refused == set(X86_64_REFUSED.values())
    assert allowed == set(range(1024)) - refused
    assert _run_filter(program, AUDIT_ARCH_X86_64, 0x40000000 | 39) == EPERM  # x32's getpid
    assert _run_filter(program, AUDIT_ARCH_I386, 20) == EPERM  # i386's getpid
