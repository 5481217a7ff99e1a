"""The deployment planner: what to launch and kill to move an app to its wanted instances. Pure.

One function, `plan()`, over a snapshot of the app's instances; the scheduler calls it after
every change and carries out the plan. It covers scaling, replacing lost instances, rolling
updates and unhealthy instances with one set of rules:

- never kill a serving (healthy) instance if that leaves fewer than `minimum_health_capacity`
  x instances serving;
- never run more than (1 + `maximum_over_capacity`) x instances, counting those being killed
  (they still hold their resources);
- kill unhealthy instances, but no more at once than the strategy allows to be down, so a
  health-check storm (every instance failing together) does not take the whole app down;
- among candidates, kill the ones not serving first, then the youngest (Marathon's default);
- an instance on a draining agent is replaced like one of an old version: a new one starts
  elsewhere first, and it is killed once the app stays at its healthy capacity without it
  (Nomad's migrate); the master kills it anyway at the drain's deadline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Marathon refuses minimum_health_capacity 1 with maximum_over_capacity 0 (no way to progress);
# we validate it away too, and `max_total` still leaves one extra slot as a last resort.
_EPS = 1e-9


@dataclass(frozen=True)
class Strategy:
    minimum_health_capacity: float = 1.0
    maximum_over_capacity: float = 1.0


@dataclass(frozen=True)
class InstanceView:
    """One instance as the planner sees it."""

    task_id: str
    version: str
    running: bool  # RUNNING (else staged/starting)
    healthy: bool | None  # the last health verdict; None: not known yet
    has_check: bool  # the instance's definition has a health check
    launched_at: float
    killing: bool = False  # a kill was sent; the task has not ended yet
    draining: bool = False  # its agent is draining: to be replaced elsewhere

    @property
    def serving(self) -> bool:
        """Counts towards the healthy capacity (and is an endpoint)."""
        if not self.running or self.killing:
            return False
        return self.healthy is True if self.has_check else self.healthy is not False

    @property
    def failing(self) -> bool:
        return self.healthy is False and not self.killing


@dataclass(frozen=True)
class Plan:
    launch: int  # new instances of the wanted version to launch now
    kill: tuple[tuple[str, str], ...] = ()  # (task_id, why)


def min_healthy(target: int, strategy: Strategy) -> int:
    return min(target, math.ceil(target * strategy.minimum_health_capacity - _EPS))


def max_total(target: int, strategy: Strategy) -> int:
    extra = math.floor(target * strategy.maximum_over_capacity + _EPS)
    if extra == 0 and min_healthy(target, strategy) >= target > 0:
        extra = 1  # otherwise a rolling update could neither kill nor launch
    return target + extra


def _kill_order(instances: Iterable[InstanceView]) -> list[InstanceView]:
    """Not serving first, then youngest first."""
    return sorted(instances, key=lambda i: (i.serving, -i.launched_at))


def plan(
    target: int, version: str, instances: Sequence[InstanceView], strategy: Strategy = Strategy()
) -> Plan:
    """What to do now to reach `target` serving instances of `version`."""
    live = [i for i in instances if not i.killing]
    in_flight = len(instances) - len(live)  # kills already under way
    floor = min_healthy(target, strategy)
    kills: list[tuple[str, str]] = []
    killed: set[str] = set()

    def kill(instance: InstanceView, why: str) -> None:
        kills.append((instance.task_id, why))
        killed.add(instance.task_id)

    # 1. Unhealthy instances, at most as many at once as may be down (at least one, so that
    #    an app whose strategy allows none down can still replace a broken instance).
    budget = max(1, target - floor) - in_flight
    for instance in _kill_order(i for i in live if i.failing):
        if budget <= 0:
            break
        kill(instance, "unhealthy")
        budget -= 1

    remaining = [i for i in live if i.task_id not in killed]
    new = [i for i in remaining if i.version == version and not i.draining]
    old = [i for i in remaining if i.version != version or i.draining]

    # 2. Too many of the wanted version (scaled down): the extra ones go now.
    for instance in _kill_order(new)[: max(0, len(new) - target)]:
        kill(instance, f"scaled down to {target}")
    new = [i for i in new if i.task_id not in killed]

    # 3. Old versions: those not serving cost no capacity; serving ones while enough remain.
    serving = sum(1 for i in remaining if i.serving and i.task_id not in killed)
    for instance in _kill_order(old):
        if instance.serving:
            if serving - 1 < floor:
                continue
            serving -= 1
        if not target:
            kill(instance, "app suspended")
        elif instance.version != version:
            kill(instance, f"replaced by version {version}")
        else:
            kill(instance, "moved off its draining agent")

    # 4. Launch what is missing, within the capacity ceiling.
    occupied = len(instances)  # those being killed still hold their resources
    room = max_total(target, strategy) - occupied
    launch = max(0, min(target - len(new), room))
    return Plan(launch=launch, kill=tuple(kills))
