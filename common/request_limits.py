"""The lengths of ids and names a request may carry, checked before any handler sees it.

Every gRPC server of Agora (the master, the agents' file API, the batch and services APIs)
installs `RequestLimits`: an id of 10 MB is refused with INVALID_ARGUMENT naming the field, its
size and the limit, showing only its first 40 characters, instead of being looked up, stored,
logged, or echoed whole in a NOT_FOUND. Pure but for the interceptor.
"""

from __future__ import annotations

import inspect

import grpc

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_NAME_LENGTH",
    "LimitError",
    "RequestLimits",
    "check_request_strings",
    "check_text",
]

MAX_ID_LENGTH = 256  # task, framework, agent, offer, job and app ids
MAX_NAME_LENGTH = 256  # names, roles, users, hostnames, label keys

# Fields whose names say they hold a name rather than an id.
_NAME_FIELDS = frozenset({"role", "framework", "name", "principal", "hostname", "user"})


class LimitError(ValueError):
    """A request's field is past its limit; the message names it and shows it truncated."""


def check_text(field: str, value: str, limit: int = MAX_NAME_LENGTH) -> None:
    if len(value) > limit:
        raise LimitError(
            f"{field}: {len(value)} characters ({value[:40]!r}...); the limit is {limit}"
        )


def check_request_strings(message, depth: int = 0) -> None:
    """Ids and names in a request (its own fields and those of the messages it lists, such as
    Reconcile's tasks): past MAX_ID_LENGTH or MAX_NAME_LENGTH, LimitError naming the field."""
    for field, value in message.ListFields():
        name = field.name
        if field.type == field.TYPE_STRING:
            limit = MAX_ID_LENGTH if name == "id" or name.endswith(("_id", "_ids")) else None
            if name in _NAME_FIELDS:
                limit = MAX_NAME_LENGTH
            if limit is None:
                continue
            for text in value if field.is_repeated else (value,):
                check_text(name, text, limit)
        elif field.type == field.TYPE_MESSAGE and depth < 2:
            if field.message_type.GetOptions().map_entry:
                continue
            for item in value if field.is_repeated else (value,):
                check_request_strings(item, depth + 1)


class RequestLimits(grpc.aio.ServerInterceptor):
    """Runs check_request_strings on every request of a unary-request method, so no handler
    sees an id of megabytes (streaming requests are checked by their handlers)."""

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or handler.request_streaming:
            return handler
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request, context):
                try:
                    check_request_strings(request)
                except LimitError as e:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                return await inner(request, context)

            return handler._replace(unary_unary=unary)
        inner_stream = handler.unary_stream
        if not inspect.isasyncgenfunction(inner_stream):
            return handler  # a stream written with context.write(): left to its handler

        async def stream(request, context):
            try:
                check_request_strings(request)
            except LimitError as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            async for reply in inner_stream(request, context):
                yield reply

        return handler._replace(unary_stream=stream)
