"""Validation of Accept and Decline: pure functions that return a plan or raise a clear error.

Everything is checked before anything happens, so a rejected Accept launches nothing and leaves
its offers valid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass

import grpc

from agora.common import EMPTY, ResourceError, Resources
from agora.common.resources import ranges_subtract
from agora.master.errors import CallError, Reason, naming_task
from agora.master.registry import Offer
from agora.v1 import common_pb2, scheduler_pb2

# An image name as agents store them (agent/images.py): registry/path:tag or @digest.
_IMAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
# The longest time limit a task may give (TaskInfo.max_completion_seconds): a year.
MAX_COMPLETION_SECONDS = 365 * 24 * 3600.0

# Why an optimistic offer was rescinded when another framework's Accept (or a hold) took its
# resources: an Accept naming it fails with ABORTED (OFFER_CONFLICT), not as a stale offer.
TAKEN = "its resources were taken first by another framework"


@dataclass(frozen=True)
class LaunchPlan:
    agent_id: str
    offer_ids: tuple[str, ...]
    offered: Resources
    tasks: tuple[tuple[common_pb2.TaskInfo, Resources], ...]
    unused: Resources
    refuse_seconds: float


def refuse_seconds(filters: common_pb2.Filters, default: float) -> float:
    if not filters.HasField("refuse_seconds"):
        return default
    value = filters.refuse_seconds
    if not math.isfinite(value) or value < 0:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"filters.refuse_seconds must be 0 or more seconds, got {value}",
        )
    return value


def check_offers(
    framework_id: str,
    offer_ids: Sequence[str],
    offers: Mapping[str, Offer],
    gone: Mapping[str, str],
) -> list[Offer]:
    """The named offers, which must exist, be distinct and belong to the framework."""
    if not offer_ids:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "no offer_ids given")
    seen: set[str] = set()
    out = []
    for offer_id in offer_ids:
        if offer_id in seen:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"offer {offer_id} is named twice; name each offer once",
            )
        seen.add(offer_id)
        offer = offers.get(offer_id)
        if offer is None:
            if offer_id in gone and gone[offer_id].startswith(TAKEN):
                raise CallError(
                    grpc.StatusCode.ABORTED,
                    f"offer {offer_id} was rescinded: {gone[offer_id]}. Nothing was "
                    "launched: re-plan with fresh offers",
                    Reason.OFFER_CONFLICT,
                )
            if offer_id in gone:
                raise CallError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"offer {offer_id} is no longer valid ({gone[offer_id]}); wait for a new offer",
                    Reason.OFFER_GONE,
                )
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"offer {offer_id} is unknown; use an offer_id from an OFFERS event",
                Reason.OFFER_UNKNOWN,
            )
        if offer.framework_id != framework_id:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"offer {offer_id} was made to another framework",
                Reason.OFFER_NOT_YOURS,
            )
        out.append(offer)
    return out


def plan_launch(
    framework_id: str,
    request: scheduler_pb2.AcceptRequest,
    offers: Mapping[str, Offer],
    gone: Mapping[str, str],
    active_task_ids: Container[str],
    default_refuse_seconds: float,
    minimum: tuple[float, float] = (0.0, 0.0),
) -> LaunchPlan:
    """Checks a whole Accept; returns what to launch where, or raises CallError. `minimum`:
    the cpus and mem (MB) every task must ask for at least (the master's --min-task-cpus and
    --min-task-mem)."""
    chosen = check_offers(framework_id, request.offer_ids, offers, gone)
    agents = sorted({o.agent_id for o in chosen})
    if len(agents) > 1:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"offers are on different agents ({', '.join(agents)}); one Accept may "
            "merge offers of a single agent only",
        )
    offered = EMPTY
    for offer in chosen:
        offered = offered + offer.resources
    refuse = refuse_seconds(request.filters, default_refuse_seconds)

    tasks: list[tuple[common_pb2.TaskInfo, Resources]] = []
    ids_in_call: set[str] = set()
    remaining = offered
    for operation in request.operations:
        if not operation.HasField("launch"):
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "unsupported operation: only LAUNCH is implemented",
            )
        for task in operation.launch.task_infos:
            with naming_task(task.task_id):
                resources = _check_task(task, ids_in_call, active_task_ids)
                _check_charged(task.task_id, resources, *minimum)
            ids_in_call.add(task.task_id)
            if not remaining.contains(resources):
                raise CallError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"task {task.task_id} needs {resources} but the offers have only "
                    f"{remaining} left: short of {shortfall(remaining, resources)}",
                    Reason.INSUFFICIENT_RESOURCES,
                )
            remaining = remaining - resources
            tasks.append((task, resources))
    return LaunchPlan(
        agents[0], tuple(o.offer_id for o in chosen), offered, tuple(tasks), remaining, refuse
    )


def _check_charged(task_id: str, resources: Resources, cpus: float, mem: float) -> None:
    """Every task asks for some cpus and mem (issue 35): a task without mem ran with no memory
    limit, and one without cpus was charged nothing, so a thousand of them took an agent."""
    for name, least, what in (("cpus", cpus, "CPUs"), ("mem", mem, "MB of memory")):
        asked = resources.scalar(name)
        if asked <= 0 or asked < least:
            floor = f"at least {least:g}" if least > 0 else "some"
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"task {task_id} asks for {name}:{asked:g}; every task must ask for {floor} "
                f"{what} (the master's --min-task-{name}), so that it is limited and charged",
            )


def _check_task(
    task: common_pb2.TaskInfo, ids_in_call: set[str], active_task_ids: Container[str]
) -> Resources:
    if not task.task_id:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "a task has an empty task_id")
    if task.task_id in ids_in_call:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task id {task.task_id} appears twice in this Accept; ids must be unique",
        )
    if task.task_id in active_task_ids:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task id {task.task_id} is already used by an active task of this "
            "framework (or one whose final update is not acknowledged yet); "
            "choose another id",
        )
    has_argv, has_shell = bool(task.command.argv), bool(task.command.shell)
    if not has_argv and not has_shell:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id} has no command: set command.argv or command.shell",
        )
    if has_argv and has_shell:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id} sets both command.argv and command.shell; set exactly one",
        )
    limit = task.max_completion_seconds
    if not math.isfinite(limit) or not 0 <= limit <= MAX_COMPLETION_SECONDS:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id}: max_completion_seconds must be 0 (no limit) to "
            f"{MAX_COMPLETION_SECONDS:g} (a year), got {limit:g}",
        )
    if task.HasField("container"):
        image, network = task.container.image, task.container.network
        if not _IMAGE_NAME.match(image) or ".." in image:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"task {task.task_id}: container.image {image!r} is not an image name (e.g. "
                "busybox:latest)",
            )
        if network not in ("", "host", "none"):
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"task {task.task_id}: container.network {network!r}: use host or none",
            )
    if not math.isfinite(task.kill_grace_period_seconds) or task.kill_grace_period_seconds < 0:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id}: kill_grace_period_seconds must be 0 or more",
        )
    try:
        resources = Resources.from_proto(task.resources)
    except ResourceError as e:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT, f"task {task.task_id} has bad resources: {e}"
        ) from None
    if not resources:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id} uses no resources; give it some cpus and mem from the offer",
        )
    gpus = resources.scalar("gpus")
    if gpus != int(gpus):
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"task {task.task_id} asks for gpus:{gpus:g}; GPUs are whole devices (as in Mesos)",
        )
    return resources


def shortfall(available: Resources, needed: Resources) -> str:
    """What `needed` lacks in `available`, e.g. 'cpus:1.5;ports:[31005-31005]'."""
    scalars = {}
    for key, amount in needed.scalars.items():
        have = available.scalars.get(key, 0.0)
        if have + 1e-9 < amount:
            scalars[key] = amount - have
    ranges = {}
    for key, value in needed.ranges.items():
        missing = ranges_subtract(value, available.ranges.get(key, ()))
        if missing:
            ranges[key] = missing
    return str(Resources(scalars, ranges))
