"""Prometheus metrics for every daemon: one registry each, served at /metrics on its HTTP layer.

A registry per daemon, never prometheus-client's global one: `agora local` runs a master, agents
and frameworks in one process, and each must report only its own figures. Live figures (tasks by
state, queue depths) are read from the daemon's state when scraped, by a collector; counters
and histograms are updated where the event happens.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from agora.common.authz import Action, Authorizer, refusal_message
from agora.common.http import HttpServer, http_principal
from agora.common.tokens import TokenBook

__all__ = ["GrpcMetrics", "metrics_server"]


def metrics_server(
    host: str,
    port: int,
    registry: CollectorRegistry,
    ssl_context=None,
    authorizer: Callable[[], Authorizer | None] | None = None,
    tokens: TokenBook | None = None,
) -> HttpServer:
    """An HTTP server answering GET /metrics with `registry` in Prometheus' text format.

    `authorizer`: the daemon's current ACLs (None: no ACLs, anyone may read). With them, only
    a principal that `read_metrics` names may: Prometheus scrapes with a client certificate
    (its scrape config's tls_config) or, over HTTPS, a bearer token that `tokens` (the
    daemon's --tokens) knows (its authorization: credentials_file); or the rule names
    ANONYMOUS."""

    async def metrics(request: web.Request) -> web.Response:
        acls = authorizer() if authorizer is not None else None
        if acls is not None:
            principal = http_principal(request, tokens)
            decision = acls.authorize(principal, Action.READ_METRICS, "")
            if not decision.allowed:
                text = refusal_message(principal, Action.READ_METRICS, "/metrics", decision)
                return web.Response(status=403, text=text + "\n")
        # Collected on the event loop: collectors read the daemon's state, which only the loop
        # changes, so they must not run on another thread. They are kept cheap for that.
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return HttpServer(host, port, [web.get("/metrics", metrics)], ssl_context)


class GrpcMetrics(grpc.aio.ServerInterceptor):
    """Counts a server's gRPC calls by service, method and status code, as an interceptor.

    `agora_grpc_server_handled_total` follows go-grpc-prometheus' name, so dashboards made for
    other gRPC servers work. A stream counts once, when it ends.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handled = Counter(
            "agora_grpc_server_handled",
            "gRPC calls this server completed, by service, method and status code.",
            ["grpc_service", "grpc_method", "grpc_code"],
            registry=registry,
        )

    def count(self, service: str, method: str, code: str) -> None:
        """Counts a call handled without a gRPC call of its own (one carried on a stream)."""
        self.handled.labels(service, method, code).inc()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        count = self.handled.labels  # bound once per call, looked up per outcome

        def done(context, error: BaseException | None) -> None:
            code = _code_of(context, error)
            count(service, method, code).inc()

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary_unary(request, context):
                try:
                    reply = await inner(request, context)
                except BaseException as e:
                    done(context, e)
                    raise
                done(context, None)
                return reply

            return handler._replace(unary_unary=unary_unary)
        if handler.unary_stream is not None or handler.stream_stream is not None:
            streaming = handler.unary_stream or handler.stream_stream
            # Two names: an async generator function and a coroutine one differ in type.
            if inspect.isasyncgenfunction(streaming):

                async def stream_replies(request, context):
                    try:
                        async for reply in streaming(request, context):
                            yield reply
                    except BaseException as e:
                        done(context, e)
                        raise
                    done(context, None)

                stream = stream_replies
            else:  # a coroutine that writes with context.write()

                async def stream_writes(request, context):
                    try:
                        await streaming(request, context)
                    except BaseException as e:
                        done(context, e)
                        raise
                    done(context, None)

                stream = stream_writes

            if handler.unary_stream is not None:
                return handler._replace(unary_stream=stream)
            return handler._replace(stream_stream=stream)
        return handler  # client streaming: not used by Agora's services


def _code_of(context, error: BaseException | None) -> str:
    code = context.code()
    if code is not None and code != grpc.StatusCode.OK:
        return code.name
    if error is None:
        return "OK"
    if isinstance(error, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"
