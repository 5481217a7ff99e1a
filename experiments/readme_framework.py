"""The README's "Write your own framework" section as a program, for tests and benchmarks.

The section's four Python blocks, put in one file, are a framework (tests/cluster/test_readme.py
runs them as written). `agora experiment throughput` runs parts 1-3 as written (the class:
its task list, `on_offers`, `on_update`) under a part 4 of its own: the README's
`run(Hello(5), ...)` with N tasks of `true` instead of 5 of `echo`, and a record of when each
task was launched, seen RUNNING and seen ending, written as JSON when `run()` returns.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "## Write your own framework"

__all__ = ["README", "ReadmeChanged", "benchmark_script", "framework_blocks"]


class ReadmeChanged(ValueError):
    """The README's section no longer has the shape this code expects."""


def framework_blocks(readme: Path = README) -> list[str]:
    """The Python code blocks of the README's "Write your own framework" section, in order."""
    text = readme.read_text()
    if SECTION not in text:
        raise ReadmeChanged(f"{readme} has no {SECTION!r} section")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


# Part 4 for the benchmark: the README's own part 4 with Hello(N) and `true`, timed. The subclass
# changes nothing the framework does: it notes the time of each launch (a driver that passes
# every call through) and of each update before the README's code handles it.
_TIMED_MAIN = '''

# --- part 4, as `agora experiment throughput` runs it: the README's `run(Hello(5), ...)` with
# N tasks of `true`, and the time each task was launched, seen RUNNING and seen ending ---
import dataclasses as _dataclasses
import json as _json
import time as _time


class _TimedDriver:
    """The driver, passed through; notes when each task is launched."""

    def __init__(self, driver, launched):
        self._driver = driver
        self._launched = launched

    def __getattr__(self, name):
        return getattr(self._driver, name)

    async def launch(self, offers, tasks, *args, **kwargs):
        tasks = list(tasks)
        now = _time.time()
        for task in tasks:
            self._launched.setdefault(task.task_id, now)
        return await self._driver.launch(offers, tasks, *args, **kwargs)


class _Timed(Hello):
    def __init__(self, count):
        super().__init__(count)
        self.pending = [_dataclasses.replace(spec, command="true") for spec in self.pending]
        self.times = {"launched": {}, "running": {}, "ended": {}, "state": {}}

    async def on_offers(self, driver, offers):
        await super().on_offers(_TimedDriver(driver, self.times["launched"]), offers)

    async def on_update(self, driver, status):
        now = _time.time()
        if status.state == TaskState.TASK_RUNNING:
            self.times["running"].setdefault(status.task_id, now)
        elif is_terminal(status.state) and status.task_id not in self.times["ended"]:
            self.times["ended"][status.task_id] = now
            self.times["state"][status.task_id] = state_name(status.state)
        await super().on_update(driver, status)


if __name__ == "__main__":
    configure_logging("warning")
    master = os.environ.get("AGORA_MASTER", "127.0.0.1:5050")
    hello = _Timed(int(os.environ["AGORA_BENCH_TASKS"]))
    try:
        run(hello, master=master, name="hello", role="*", failover_timeout=60)
    finally:  # also when stopped (SIGINT) before its end: what it did so far
        with open(os.environ["AGORA_BENCH_TIMES"], "w") as _out:
            _json.dump(hello.times, _out)
'''


def benchmark_script(readme: Path = README) -> str:
    """Parts 1-3 of the README's framework as written, then the timed part 4 above."""
    blocks = framework_blocks(readme)
    if len(blocks) != 4 or "run(Hello(" not in blocks[3] or "class Hello" not in blocks[0]:
        raise ReadmeChanged(
            f"{readme}: the {SECTION!r} section should show four Python blocks, the class "
            "Hello first and `run(Hello(...))` last; update experiments/readme_framework.py "
            "to its new shape"
        )
    return "\n".join(blocks[:3]) + _TIMED_MAIN
