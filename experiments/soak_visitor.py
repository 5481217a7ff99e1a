"""A framework that comes and goes, for `agora experiment soak` (run as a module).

It subscribes, launches --tasks short tasks (each leaves start and end marker files named after
its task id and process id), relaunches one that ends LOST, UNKNOWN, DROPPED or GONE under a new
task id, tears itself down once every task finished, and writes what happened to --result as
JSON: the tasks that finished, those relaunched, and any that ended otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from agora.sdk import Framework, TaskSpec, fit, run
from agora.v1 import common_pb2

RELAUNCH = {
    common_pb2.TASK_LOST,
    common_pb2.TASK_UNKNOWN,
    common_pb2.TASK_DROPPED,
    common_pb2.TASK_GONE,
    common_pb2.TASK_UNREACHABLE,
}
FINAL = {common_pb2.TASK_FINISHED, common_pb2.TASK_FAILED, common_pb2.TASK_KILLED}


class Visitor(Framework):
    def __init__(self, name: str, tasks: int, seconds: float, markers: Path) -> None:
        self.name = name
        self.seconds = seconds
        self.markers = markers
        self.pending = [self._spec(f"{name}-{i}-1") for i in range(tasks)]
        self.live: set[str] = set()
        self.finished: list[str] = []
        self.relaunched: list[str] = []
        self.failed: dict[str, str] = {}
        self._attempts: dict[str, int] = {}

    def _spec(self, task_id: str) -> TaskSpec:
        mark = shlex.quote(str(self.markers / f"visitor.{task_id}"))
        command = f"touch {mark}.$$.start; sleep {self.seconds}; touch {mark}.$$.end"
        return TaskSpec(task_id, cpus=0.1, mem=16, command=command, task_id=task_id)

    async def on_offers(self, driver, offers):
        if not self.pending:
            await driver.decline(offers)
            return
        result = fit(offers, self.pending)
        self.pending = result.unplaced
        for placement in result.placements:
            await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
            self.live.update(t.task_id for t in placement.tasks)
        if result.unused:
            await driver.decline(result.unused, refuse_seconds=0)

    async def on_update(self, driver, status):
        if status.task_id not in self.live:
            return
        if status.state in RELAUNCH:
            self.live.discard(status.task_id)
            base, attempt = status.task_id.rsplit("-", 1)
            self.relaunched.append(status.task_id)
            self.pending.append(self._spec(f"{base}-{int(attempt) + 1}"))
            await driver.revive()
        elif status.state in FINAL:
            self.live.discard(status.task_id)
            if status.state == common_pb2.TASK_FINISHED:
                self.finished.append(status.task_id)
            else:
                self.failed[status.task_id] = common_pb2.TaskState.Name(status.state)
        if not self.live and not self.pending:
            await driver.teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--markers", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    visitor = Visitor(args.name, args.tasks, args.seconds, args.markers)
    try:
        run(visitor, master=args.master, name=args.name, failover_timeout=120)
    finally:
        args.result.write_text(
            json.dumps(
                {
                    "finished": visitor.finished,
                    "relaunched": visitor.relaunched,
                    "failed": visitor.failed,
                    "unfinished": sorted(visitor.live | {t.task_id for t in visitor.pending}),
                }
            )
        )


if __name__ == "__main__":
    main()
