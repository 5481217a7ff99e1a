"""Whose call is it: the framework a scheduler call names, if the call may act for it."""

from __future__ import annotations

import grpc

from agora.master.errors import CallError, Reason
from agora.master.registry import Framework, Registry

__all__ = ["framework_for_call"]


def framework_for_call(
    reg: Registry, framework_id: str, stream_id: str, principal: str | None = None
) -> Framework:
    """The caller's framework, refusing unknown ids and stale or foreign streams (and, when
    `principal` is given, callers other than the one that subscribed it)."""
    framework = reg.frameworks.get(framework_id)
    if framework is None:
        if framework_id in reg.removed_frameworks:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"framework {framework_id} was torn down; subscribe afresh",
                Reason.FRAMEWORK_REMOVED,
            )
        raise CallError(
            grpc.StatusCode.NOT_FOUND,
            f"framework {framework_id!r} is not subscribed; call Subscribe first",
            Reason.FRAMEWORK_UNKNOWN,
        )
    if not framework.connected or stream_id != framework.stream_id:
        raise CallError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"stream {stream_id!r} is not the current subscription of framework "
            f"{framework_id}; use the stream_id from your latest SUBSCRIBED event",
            Reason.STREAM_STALE,
        )
    if principal is not None and framework.principal and principal != framework.principal:
        raise CallError(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{principal or 'an anonymous caller'} may not act for framework "
            f"{framework_id}, which {framework.principal} subscribed",
            Reason.PERMISSION_DENIED,
        )
    return framework
