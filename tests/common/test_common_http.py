"""The daemons' HTTP layer serves its routes on the caller's event loop, on a port it picks."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from agora.common.http import HttpServer


async def test_serves_routes_on_a_free_loopback_port_and_stops():
    calls = []

    async def hello(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"hello": request.query.get("name", "")})

    server = HttpServer("127.0.0.1", 0, [web.get("/hello", hello)])
    port = await server.start()
    assert port > 0 and server.address == f"127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.address}/hello?name=agora") as reply:
            assert reply.status == 200
            assert await reply.json() == {"hello": "agora"}
        async with session.get(f"http://{server.address}/nothing-here") as reply:
            assert reply.status == 404
    assert calls == ["/hello"]
    await server.stop()
    async with aiohttp.ClientSession() as session:
        try:
            await session.get(f"http://{server.address}/hello")
        except aiohttp.ClientConnectionError:
            pass
        else:
            raise AssertionError("the server still answers after stop()")
