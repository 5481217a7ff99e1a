"""Checks of what peers send about themselves: framework info and role names."""

from __future__ import annotations

import math
import re

import grpc

from agora.common.rpc import parse_address
from agora.master.errors import CallError
from agora.v1 import common_pb2

_ROLE = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.\-/*]*")


def check_role(role: str) -> None:
    if not role or not _ROLE.fullmatch(role) or role in (".", ".."):
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"role {role!r} is not valid: use letters, digits, _ . - / or '*'",
        )


def check_framework_info(info: common_pb2.FrameworkInfo) -> None:
    if not info.name:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "framework name is empty; name it")
    if info.role:
        check_role(info.role)
    timeout = info.failover_timeout_seconds
    if not math.isfinite(timeout) or timeout < 0:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"failover_timeout_seconds must be 0 or more, got {timeout}",
        )
    if info.service_address:
        try:
            parse_address(info.service_address)
        except ValueError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"service_address: {e}") from None
