"""Limits on everything a caller controls, checked at the edge before anything is stored or
logged in full: no single call, framework or task can bloat or stall the master.

Past a limit a call gets INVALID_ARGUMENT naming the field, the limit and the size it had (a
value is shown only truncated). The numbers are generous for any real use; they are here so
that 10 MB names, 100,000 labels or 200,000 reconcile ids cannot be sent for free.
"""

from __future__ import annotations

import math

import grpc

from agora.common import request_limits, task_limits
from agora.master.errors import CallError

__all__ = [
    "MAX_ACKS_PER_CALL",
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_OFFERS_PER_CALL",
    "MAX_RECONCILE_TASKS",
    "MAX_TASKS_PER_ACCEPT",
    "MIN_TASK_CPUS",
    "check_count",
    "check_framework_info_size",
    "check_kill_grace",
    "check_register_size",
    "check_task_size",
    "check_text",
    "check_request_strings",
]

MAX_ID_LENGTH = request_limits.MAX_ID_LENGTH  # task, framework, agent and offer ids
MAX_NAME_LENGTH = request_limits.MAX_NAME_LENGTH  # names, roles, users, hostnames, label keys
MAX_LABEL_VALUE_LENGTH = task_limits.MAX_LABEL_VALUE_LENGTH
MAX_LABELS = task_limits.MAX_LABELS
MAX_CAPABILITIES = 32
MAX_COMMAND_BYTES = task_limits.MAX_COMMAND_BYTES
MAX_ENVIRONMENT_BYTES = task_limits.MAX_ENVIRONMENT_BYTES
MAX_TASKS_PER_ACCEPT = task_limits.MAX_TASKS_PER_ACCEPT
MAX_OFFERS_PER_CALL = 1000
MAX_RECONCILE_TASKS = 10_000
MAX_ACKS_PER_CALL = 10_000
MAX_AGENT_TASKS = 10_000  # tasks an agent may list when it registers
MAX_ATTRIBUTES = 64
MAX_HOLD_RESOURCES = 64  # resource entries in a hold's task size
MIN_TASK_CPUS = task_limits.MIN_TASK_CPUS
# The longest drain deadline: a year (an agent drained for longer has no deadline: 0).
MAX_DRAIN_DEADLINE_SECONDS = 365 * 24 * 3600.0


def _refuse(field: str, message: str) -> CallError:
    return CallError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {message}")


def check_text(field: str, value: str, limit: int = MAX_NAME_LENGTH) -> None:
    try:
        request_limits.check_text(field, value, limit)
    except request_limits.LimitError as e:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None


def check_count(field: str, count: int, limit: int) -> None:
    if count > limit:
        raise _refuse(field, f"{count} entries; the limit is {limit} per call")


def check_kill_grace(field: str, seconds: float, maximum: float) -> None:
    """A kill grace period within the master's maximum (--max-kill-grace): a task that
    ignores SIGTERM is SIGKILLed after at most that long."""
    if seconds > maximum:
        raise _refuse(field, f"{seconds:g} s; the longest allowed is {maximum:g} s")


def check_drain_deadline(seconds: float) -> None:
    """A drain deadline: 0 (none) or a finite number of seconds up to a year."""
    if math.isnan(seconds) or seconds < 0 or seconds > MAX_DRAIN_DEADLINE_SECONDS:
        raise _refuse(
            "deadline_seconds",
            f"{seconds:g}; give seconds from 0 (no deadline) to {MAX_DRAIN_DEADLINE_SECONDS:g}",
        )


def check_framework_info_size(info) -> None:
    check_text("framework_id", info.framework_id, MAX_ID_LENGTH)
    for field in ("name", "user", "role", "hostname"):
        check_text(field, getattr(info, field))
    check_text("service_address", info.service_address)
    check_count("capabilities", len(info.capabilities), MAX_CAPABILITIES)
    for capability in info.capabilities:
        check_text("capabilities[]", capability)
    _check_labels(info.labels)


def _check_labels(labels) -> None:
    try:
        task_limits.check_labels(labels)
    except request_limits.LimitError as e:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None


def check_register_size(register) -> None:
    """An agent's Register: its id, names, attributes and the tasks it lists."""
    check_text("agent_id", register.info.agent_id, MAX_ID_LENGTH)
    check_text("hostname", register.info.hostname)
    check_text("address", register.info.address)
    check_count("attributes", len(register.info.attributes), MAX_ATTRIBUTES)
    check_count("isolation", len(register.info.isolation), MAX_ATTRIBUTES)
    for word in register.info.isolation:
        check_text("isolation", word)
    for attribute in register.info.attributes:
        check_text("attribute name", attribute.name)
        check_text(f"attribute {attribute.name[:40]!r}", attribute.text)
    check_count("tasks", len(register.tasks), MAX_AGENT_TASKS)
    for running in register.tasks:
        check_text("framework_id", running.framework_id, MAX_ID_LENGTH)
        check_task_size(running.task)


def check_task_size(task) -> None:
    """A TaskInfo's ids, names, command and environment within the limits (task_limits.py,
    which the frameworks check at submission too)."""
    try:
        task_limits.check_task_size(task)
    except request_limits.LimitError as e:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None


def check_request_strings(message) -> None:
    """common.request_limits' check, as the master's CallError (INVALID_ARGUMENT)."""
    try:
        request_limits.check_request_strings(message)
    except request_limits.LimitError as e:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
