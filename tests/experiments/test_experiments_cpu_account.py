"""cpu_account.account(): the arithmetic of a CPU window, on hand-made readings."""

from __future__ import annotations

import pytest

from agora.experiments.cpu_account import (
    TASK_RUNTIME,
    Component,
    ProcTimes,
    Reading,
    account,
    short_command,
)

ROOT = 100  # the runner


def machine(user: float, system: float, idle: float, softirq: float = 0.0, **extra) -> dict:
    return dict(
        user=user, nice=0.0, system=system, irq=0.0, softirq=softirq,
        steal=0.0, iowait=0.0, idle=idle, **extra,
    )  # fmt: skip


def proc(pid: int, ppid: int, user: float, system: float, name: str = "python", **kw) -> ProcTimes:
    return ProcTimes(pid, ppid, name, kw.pop("create_time", 1.0), user, system, **kw)


def reading(at: float, m: dict, named: dict, procs: list[ProcTimes]) -> Reading:
    return Reading(at, m, named, {p.pid: p for p in procs})


COMPONENTS = [
    Component("master", "master", 200, "the master"),
    Component("runner", "runner", ROOT, "the runner"),
]


def test_components_kernel_outside_and_other_add_up_to_the_busy_time():
    # 2 s window, 2 cpus: busy 3.0 CPU s (user 2.0 + system 0.8 + softirq 0.2), idle 1.0.
    master0, master1 = proc(200, ROOT, 1.0, 1.0), proc(200, ROOT, 1.5, 1.2)  # 0.7 s
    runner0, runner1 = proc(ROOT, 1, 3.0, 0.0), proc(ROOT, 1, 3.4, 0.1)  # 0.5 s
    before = reading(
        10.0,
        machine(100.0, 50.0, 500.0, softirq=5.0),
        {"master": master0, "runner": runner0},
        [
            master0,
            runner0,
            proc(1, 0, 5.0, 5.0),  # init: outside, 0.1 s
            proc(7, 2, 0.0, 1.0, name="kworker/0:1"),  # kernel thread, 0.1 s
            proc(9, 2, 0.0, 1.0, name="ksoftirqd/0"),  # in softirq already: not counted again
            proc(300, 1, 2.0, 0.0),  # another user's benchmark, 0.4 s
            proc(301, 200, 0.0, 0.0),  # our short-lived descendant: falls in other
        ],
    )
    after = reading(
        12.0,
        machine(102.0, 50.8, 501.0, softirq=5.2),
        {"master": master1, "runner": runner1},
        [
            master1,
            runner1,
            proc(1, 0, 5.05, 5.05),
            proc(7, 2, 0.0, 1.1, name="kworker/0:1"),
            proc(9, 2, 0.0, 1.5, name="ksoftirqd/0"),
            proc(300, 1, 2.4, 0.0),
            proc(301, 200, 0.3, 0.0),
            proc(302, 1, 0.05, 0.0, create_time=11.0),  # born in the window: all of it
        ],
    )
    cpu = account(before, after, COMPONENTS, count=100, unit="task", root=ROOT)
    c = cpu["components"]
    assert cpu["machine"]["busy_basis"] == "cpu_times"
    assert cpu["machine"]["busy_cpu_seconds"] == pytest.approx(3.0)
    assert cpu["machine"]["busy_ms_per_task"] == pytest.approx(30.0)
    assert c["master"]["cpu_seconds"] == pytest.approx(0.7)
    assert c["master"]["user_cores"] == pytest.approx(0.25)
    assert c["master"]["ms_per_task"] == pytest.approx(7.0)
    assert c["runner"]["cpu_seconds"] == pytest.approx(0.5)
    assert c["kernel_threads"]["cpu_seconds"] == pytest.approx(0.1)
    assert c["interrupts"]["cpu_seconds"] == pytest.approx(0.2)
    assert c["outside"]["cpu_seconds"] == pytest.approx(0.1 + 0.4 + 0.05)
    # 3.0 - (0.7 + 0.5 + 0.1 + 0.2 + 0.55)
    assert c["other"]["cpu_seconds"] == pytest.approx(0.95)
    assert c["other"]["cores"] == pytest.approx(0.475)
    # ticks leave other user 2.0 - (0.5 + 0.4 + 0.05 + 0.4 + 0.05) = 0.6 and system
    # 0.8 + 0.2 - (0.2 + 0.1 + 0.1 + 0.2 + 0.05) = 0.35: user is 0.6 / 0.95 of it
    assert c["other"]["user_cores"] == pytest.approx(0.475 * 0.6 / 0.95)
    assert sum(x["share"] for x in c.values()) == pytest.approx(1.0, abs=1e-3)
    assert cpu["experiment"]["cpu_seconds"] == pytest.approx(3.0 - 0.55)
    assert cpu["experiment"]["ms_per_task"] == pytest.approx(24.5)
    assert [p["pid"] for p in cpu["outside_top"]] == [300, 1, 302]
    assert cpu["notes"] == []


def test_precise_task_runtime_is_the_busy_basis_when_there_is_one():
    runner0, runner1 = proc(ROOT, 1, 0.0, 0.0), proc(ROOT, 1, 1.0, 0.0)
    before = reading(0.0, machine(0.0, 0.0, 0.0, **{TASK_RUNTIME: 50.0}), {"runner": runner0}, [])
    after = reading(
        1.0,
        machine(0.9, 0.0, 1.0, softirq=0.1, **{TASK_RUNTIME: 51.2}),
        {"runner": runner1},
        [],
    )
    cpu = account(before, after, COMPONENTS[1:], count=0, root=ROOT)
    assert cpu["machine"]["busy_basis"] == "cpuacct"
    assert cpu["machine"]["busy_cores"] == pytest.approx(1.3)  # 1.2 tasks + 0.1 softirq
    assert cpu["machine"]["cores"]["busy"] == pytest.approx(1.0)  # by ticks
    assert cpu["components"]["other"]["cpu_seconds"] == pytest.approx(0.2)
    assert cpu["components"]["runner"]["ms_per_task"] is None  # nothing finished


def test_a_process_gone_before_the_end_is_a_note_and_other_never_goes_negative():
    master0, runner0, runner1 = proc(200, ROOT, 0.0, 0.0), proc(ROOT, 1, 0, 0), proc(ROOT, 1, 2, 0)
    before = reading(0.0, machine(0, 0, 0), {"master": master0, "runner": runner0}, [])
    after = reading(1.0, machine(1.0, 0, 1.0), {"master": None, "runner": runner1}, [])
    cpu = account(before, after, COMPONENTS, count=10, root=ROOT)
    assert cpu["components"]["master"]["cpu_seconds"] == 0
    assert cpu["components"]["other"]["cpu_seconds"] == 0
    assert cpu["residual_cores"] == pytest.approx(-1.0)
    assert any("master" in n for n in cpu["notes"]) and any("more than" in n for n in cpu["notes"])


def test_short_command_names_a_process_without_its_options():
    assert short_command(["/usr/bin/python", "/tmp/bench.py"]) == "python /tmp/bench.py"
    assert (
        short_command(["python", "-m", "agora.agent.executor", "--serve"])
        == "python -m agora.agent.executor"
    )
    assert short_command(["tool", "--token", "secret"]) == "tool"
    assert short_command(["tool", "X=secret"]) == "tool"
    assert short_command([]) == ""


def test_interrupts_inside_the_process_times_are_no_component_of_their_own():
    runner0, runner1 = proc(ROOT, 1, 0.0, 0.0), proc(ROOT, 1, 0.5, 0.3)
    soft0, soft1 = proc(9, 2, 0, 0, name="ksoftirqd/0"), proc(9, 2, 0, 0.1, name="ksoftirqd/0")
    before = reading(0.0, machine(0, 0, 0, **{TASK_RUNTIME: 0.0}), {"runner": runner0}, [soft0])
    after = reading(
        1.0,
        machine(0.5, 0.2, 1.0, softirq=0.2, **{TASK_RUNTIME: 1.0}),
        {"runner": runner1},
        [soft1],
    )
    cpu = account(before, after, COMPONENTS[1:], count=4, root=ROOT, interrupts_apart=False)
    assert "interrupts" not in cpu["components"] and not cpu["interrupts_apart"]
    assert cpu["machine"]["busy_cpu_seconds"] == pytest.approx(1.0)  # task runtime alone
    assert cpu["components"]["kernel_threads"]["cpu_seconds"] == pytest.approx(0.1)
    assert cpu["components"]["other"]["cpu_seconds"] == pytest.approx(0.1)
    assert any("inside the times" in n for n in cpu["notes"])
