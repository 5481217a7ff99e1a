"""What the master counts as this framework's wants (scheduler.proto, Wants), mirrored here so
that the driver tells it again only when the framework's own count differs. Pure.

The master takes what each Accept launches off the wants it was told; the mirror does the
same with the tasks the driver launched. A framework that calls `Driver.want(...)` after
every round of offers then sends nothing while its queue only drains, and a Demand when work
came (a retry, a new job), went without a launch (a job killed), or an Accept was lost.
"""

from __future__ import annotations

from collections.abc import Iterable

from agora.common import Resources
from agora.v1 import common_pb2, scheduler_pb2

Scalars = dict[str, int]  # resource name -> amount in thousandths, summed over roles


def scalars(resources: Resources | None) -> Scalars:
    out: Scalars = {}
    for (name, _role), value in (resources.scalars if resources else {}).items():
        out[name] = out.get(name, 0) + round(value * 1000)
    return {name: amount for name, amount in out.items() if amount > 0}


def wants_proto(total: Resources, smallest: Resources | None = None) -> scheduler_pb2.Wants:
    wants = scheduler_pb2.Wants(resources=total.to_proto())
    if smallest:
        wants.smallest.extend(smallest.to_proto())
    return wants


class WantsMirror:
    def __init__(self) -> None:
        self.total: Scalars | None = None  # None: the master sets no limit
        self.smallest: Scalars = {}

    def told(self, total: Resources | None, smallest: Resources | None = None) -> None:
        """The master took these wants (None: no limit)."""
        self.total = None if total is None else scalars(total)
        self.smallest = scalars(smallest) if total is not None else {}

    def launched(self, tasks: Iterable[common_pb2.TaskInfo]) -> None:
        """An Accept launched `tasks`: the master took their resources off its count."""
        if self.total is None:
            return
        total = self.total
        scalar = common_pb2.Resource.SCALAR
        for task in tasks:  # read off the message: the master has checked it, no parse here
            for r in task.resources:
                if r.type == scalar:
                    total[r.name] = total.get(r.name, 0) - round(r.scalar * 1000)
        self.total = {name: amount for name, amount in total.items() if amount > 0}

    def differs(self, total: Resources | None, smallest: Resources | None = None) -> bool:
        """Whether the master's count is not `total` (and `smallest`)."""
        if total is None or self.total is None:
            return (total is None) != (self.total is None)
        return scalars(total) != self.total or scalars(smallest) != self.smallest
