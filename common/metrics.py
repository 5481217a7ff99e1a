"""Prometheus metrics for every daemon: one registry each, served at /metrics on its HTTP layer.

A registry per daemon, never prometheus-client's global one: `agora local` runs a master, agents
and frameworks in one process, and each must report only its own figures. Live figures (tasks by
state, queue depths) are read from the daemon's state when scraped, by a collector; counters
and histograms are updated where the event happens.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from agora.common.http import HttpServer

__all__ = ["metrics_server"]


def metrics_server(host: str, port: int, registry: CollectorRegistry) -> HttpServer:
    """An HTTP server answering GET /metrics with `registry` in Prometheus' text format."""

    async def metrics(request: web.Request) -> web.Response:
        # Collected on the event loop: collectors read the daemon's state, which only the loop
        # changes, so they must not run on another thread. They are kept cheap for that.
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return HttpServer(host, port, [web.get("/metrics", metrics)])
