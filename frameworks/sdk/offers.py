"""Fitting tasks into offers: a framework says what a task needs, the packer picks the resources.

`TaskSpec` describes one task's needs (scalars and a number of ports). `OfferPacker` packs specs
into the offers of one agent, taking reserved resources of the framework's role before
unreserved ones and concrete ports from the offered ranges, and returns `TaskInfo`s whose
resources are exactly what the master will check against the offers. `fit()` does the same over
the offers of one OFFERS event, agent by agent. Revocable offers (Offer.revocable, to a framework
with the REVOCABLE_RESOURCES capability) are never packed with ordinary ones: the master refuses
an Accept that mixes them, since a task on lent resources may be stopped at any time.
Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agora.common import UNRESERVED, Resources
from agora.frameworks.sdk.tasks import CommandLike, as_command, fill_command, new_task_id
from agora.v1 import common_pb2

Offer = common_pb2.Offer
TaskInfo = common_pb2.TaskInfo

_SCALARS = ("cpus", "mem", "disk", "gpus")
_EPSILON = 1e-9


@dataclass(frozen=True)
class TaskSpec:
    """What one task needs and runs. mem and disk are in MB; `ports` is a count, not numbers.

    `command` is a shell string, an argv list or a CommandInfo. `task_id` is generated from the
    name when empty; give one when you must know it before launching (e.g. to retry a task).
    """

    name: str
    cpus: float
    mem: float
    disk: float = 0.0
    gpus: float = 0.0
    ports: int = 0
    command: CommandLike | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    task_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    kill_grace_period_seconds: float = 0.0
    health_check: common_pb2.HealthCheck | None = None
    priority: int = 0  # TaskInfo.priority: higher may preempt lower in its role
    # TaskInfo.max_completion_seconds: its agent kills it past that many seconds (0: never).
    max_completion_seconds: float = 0.0
    # Run in a container of this image (TaskInfo.container: one the agent has imported, e.g.
    # "busybox:latest"); "": a plain process on the agent's host. `network`: host or none.
    image: str = ""
    network: str = ""
    # TaskInfo.rlimits: limits lower than the agent's, e.g. {"nofile": 1024, "core": 0}.
    rlimits: Mapping[str, int] = field(default_factory=dict)
    # scalars(), worked out once (the spec is frozen): a planner reads it for every offer it
    # tries, thousands in a large round.
    _needs: dict[str, float] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a TaskSpec needs a name")
        for name in _SCALARS:
            value = getattr(self, name)
            if not isinstance(value, int | float) or math.isnan(value) or math.isinf(value):
                raise ValueError(f"task {self.name!r}: {name} must be a finite number")
            if value < 0:
                raise ValueError(f"task {self.name!r}: {name} must not be negative, got {value}")
        if not isinstance(self.ports, int) or self.ports < 0:
            raise ValueError(f"task {self.name!r}: ports is a count of ports (an int >= 0)")
        if self.command is None:
            raise ValueError(f"task {self.name!r} needs a command (shell string or argv list)")
        as_command(self.command)  # validates early, where the mistake is made
        if self.network not in ("", "host", "none"):
            raise ValueError(f"task {self.name!r}: network is host or none, got {self.network!r}")
        if self.network and not self.image:
            raise ValueError(f"task {self.name!r}: network applies to a task with an image")
        amounts = {name: round(getattr(self, name), 3) for name in _SCALARS}
        needs = {name: value for name, value in amounts.items() if value > 0}
        object.__setattr__(self, "_needs", needs)

    def scalars(self) -> dict[str, float]:
        """The scalar needs, at Mesos' granularity of 0.001 (what the master can account)."""
        return dict(self._needs)

    def to_task_info(self, agent_id: str, resources: Resources) -> TaskInfo:
        """The TaskInfo to launch with exactly `resources` (as chosen by a packer)."""
        assert self.command is not None  # checked in __post_init__
        # The nested parts written in place: messages given to the constructor are copied
        # into it, which cost a planned task as much again (the planner makes one per task).
        info = TaskInfo(
            task_id=self.task_id or new_task_id(self.name),
            name=self.name,
            agent_id=agent_id,
            kill_grace_period_seconds=self.kill_grace_period_seconds,
            priority=self.priority,
            max_completion_seconds=self.max_completion_seconds,
        )
        resources.fill(info.resources)
        fill_command(info.command, self.command, self.env)
        if self.labels:
            info.labels.update(self.labels)
        if self.health_check is not None:
            info.health_check.CopyFrom(self.health_check)
        if self.image:
            info.container.image = self.image
            info.container.network = self.network
        if self.rlimits:
            info.rlimits.update(self.rlimits)
        return info


def offer_resources(offers: Offer | Iterable[Offer], role: str = UNRESERVED) -> Resources:
    """The resources of the offers that a framework in `role` may use."""
    if isinstance(offers, Offer):
        offers = [offers]
    total = Resources()
    for offer in offers:
        total = total + Resources.from_proto(offer.resources)
    return total.allocatable_to(role)


class OfferPacker:
    """Packs tasks into the offers of one agent; what is left stays in `remaining`.

    Reserved resources of `role` are used before unreserved ones (they are offered to no one
    else), ports are taken lowest first, and no port is ever given to two tasks. The offers
    are all revocable or all ordinary (`revocable` says which): one Accept cannot mix them.
    """

    def __init__(self, offers: Offer | Sequence[Offer], role: str = UNRESERVED) -> None:
        self.offers: list[Offer] = [offers] if isinstance(offers, Offer) else list(offers)
        if not self.offers:
            raise ValueError("OfferPacker needs at least one offer")
        agents = {offer.agent_id for offer in self.offers}
        if len(agents) > 1:
            raise ValueError(f"offers of one launch must be on one agent, got {sorted(agents)}")
        kinds = {offer.revocable for offer in self.offers}
        if len(kinds) > 1:
            raise ValueError(
                "revocable and ordinary offers cannot be launched on together: pack them apart"
            )
        self.revocable = kinds.pop()
        self.agent_id = self.offers[0].agent_id
        self.role = role or UNRESERVED
        self.remaining = offer_resources(self.offers, self.role)
        self.tasks: list[TaskInfo] = []

    @property
    def offer_ids(self) -> list[str]:
        return [offer.offer_id for offer in self.offers]

    def fits(self, spec: TaskSpec) -> bool:
        """Whether `spec` fits what is left (what _take would find, without building the
        Resources: a planner asks this of every agent in a round)."""
        if self._scalars_for(spec) is None:
            return False
        return not spec.ports or self._free_ports() >= spec.ports

    def pack(self, spec: TaskSpec) -> TaskInfo | None:
        """Takes the resources for `spec` and returns its TaskInfo, or None if it does not fit."""
        resources = self._take(spec)
        if resources is None:
            return None
        self.remaining = self.remaining - resources
        task = spec.to_task_info(self.agent_id, resources)
        self.tasks.append(task)
        return task

    def pack_all(self, specs: Iterable[TaskSpec], limit: int | None = None) -> list[TaskInfo]:
        """Packs specs in order, skipping any that does not fit, up to `limit` tasks."""
        packed: list[TaskInfo] = []
        for spec in specs:
            if limit is not None and len(packed) >= limit:
                break
            task = self.pack(spec)
            if task is not None:
                packed.append(task)
        return packed

    def _roles(self) -> list[str]:
        return [self.role, UNRESERVED] if self.role != UNRESERVED else [UNRESERVED]

    def _scalars_for(self, spec: TaskSpec) -> dict[tuple[str, str], float] | None:
        """What `spec` would take of each scalar, by role (its own role's first), or None."""
        scalars: dict[tuple[str, str], float] = {}
        for name, need in spec._needs.items():
            for role in self._roles():
                available = self.remaining.scalar(name, role)
                take = round(min(available, need), 3)
                if take > 0:
                    scalars[(name, role)] = take
                    need = round(need - take, 3)
                if need <= _EPSILON:
                    break
            if need > _EPSILON:
                return None
        return scalars

    def _free_ports(self) -> int:
        return sum(e - b + 1 for role in self._roles() for b, e in self.remaining.port_ranges(role))

    def _take(self, spec: TaskSpec) -> Resources | None:
        scalars = self._scalars_for(spec)
        if scalars is None:
            return None
        ranges: dict[tuple[str, str], list[tuple[int, int]]] = {}
        need_ports = spec.ports
        for role in self._roles():
            for begin, end in self.remaining.port_ranges(role):
                if need_ports == 0:
                    break
                count = min(end - begin + 1, need_ports)
                ranges.setdefault(("ports", role), []).append((begin, begin + count - 1))
                need_ports -= count
        if need_ports > 0:
            return None
        # Rounded and positive (_scalars_for), and spans of the offer's ordered, merged ranges
        # in order: as Resources() would leave them, without checking each again.
        return Resources._of_checked(scalars, {key: tuple(spans) for key, spans in ranges.items()})


@dataclass
class Placement:
    """Tasks to launch on one agent, with the offers to launch them from: all revocable or all
    ordinary (an agent with both kinds has a placement of each)."""

    agent_id: str
    offers: list[Offer]
    tasks: list[TaskInfo]
    specs: list[TaskSpec]

    @property
    def revocable(self) -> bool:
        """Launched on lent resources: its tasks may be stopped whenever their owner wants
        them back (TASK_KILLED, REASON_PREEMPTED)."""
        return any(offer.revocable for offer in self.offers)


@dataclass
class Fit:
    """The outcome of `fit()`: launch the placements (in this order), decline `unused`, keep
    `unplaced`."""

    placements: list[Placement]
    unused: list[Offer]
    unplaced: list[TaskSpec]


def fit(
    offers: Iterable[Offer],
    specs: Iterable[TaskSpec],
    *,
    role: str = UNRESERVED,
    max_per_agent: int | None = None,
    spread: bool = False,
) -> Fit:
    """Places as many specs as fit into the offers, in spec order.

    Offers on the same agent are packed together (the master merges them in one launch), the
    revocable ones apart from the ordinary ones (the master launches on them apart), and
    ordinary offers are tried first: a task goes on lent resources, where it may be stopped
    at any time, only when no ordinary offer holds it. By default each spec goes to the first
    agent with room (packing agents tightly); with `spread=True` agents take turns, so tasks
    land on as many agents as possible. `max_per_agent` caps the tasks placed on one agent
    (counting both kinds of offer there) in this call. The placements come revocable ones
    first: launch them in that order (see the end of this function).
    """
    if max_per_agent is not None and max_per_agent < 1:
        raise ValueError("max_per_agent must be at least 1")
    groups: dict[tuple[bool, str], list[Offer]] = {}
    for offer in offers:
        groups.setdefault((offer.revocable, offer.agent_id), []).append(offer)
    # Ordinary groups first (dicts keep insertion order; sorting on the flag alone is stable).
    packers = [
        OfferPacker(group, role) for _, group in sorted(groups.items(), key=lambda item: item[0][0])
    ]
    # Each kind takes its own turns: a spec tries every ordinary packer before any revocable
    # one, so spreading never puts a task on lent room that ordinary room could hold.
    kinds = [
        [i for i, packer in enumerate(packers) if not packer.revocable],
        [i for i, packer in enumerate(packers) if packer.revocable],
    ]
    starts = [0, 0]
    on_agent: dict[str, int] = {}
    placed_specs: dict[int, list[TaskSpec]] = {i: [] for i in range(len(packers))}
    unplaced: list[TaskSpec] = []
    for spec in specs:
        placed = False
        for kind, indices in enumerate(kinds):
            for step in range(len(indices)):
                turn = (starts[kind] + step) % len(indices)
                packer = packers[indices[turn]]
                if max_per_agent is not None and on_agent.get(packer.agent_id, 0) >= max_per_agent:
                    continue
                if packer.pack(spec) is not None:
                    on_agent[packer.agent_id] = on_agent.get(packer.agent_id, 0) + 1
                    placed_specs[indices[turn]].append(spec)
                    if spread:
                        starts[kind] = turn + 1
                    placed = True
                    break
            if placed:
                break
        if not placed:
            unplaced.append(spec)
    placements = []
    unused: list[Offer] = []
    for index, packer in enumerate(packers):
        if packer.tasks:
            placements.append(
                Placement(packer.agent_id, packer.offers, packer.tasks, placed_specs[index])
            )
        else:
            unused.extend(packer.offers)
    # Launched in list order, lent room first: an ordinary launch on an agent makes the master
    # rescind what it lends there (to lend again what is left), so a revocable placement
    # launched after an ordinary one on the same agent would name a rescinded offer.
    placements.sort(key=lambda p: not p.revocable)
    return Fit(placements, unused, unplaced)
