"""One small HTTP layer for every daemon: metrics and the dashboard are routes on it.

aiohttp serves on the daemon's own asyncio event loop, beside its grpc.aio server, so a page
reads the same in-memory state the Operator service reads (never a second copy) and no thread
touches that state. A daemon builds its routes and hands them here; this module knows nothing
of what they serve. (aiohttp rather than a hand-written server: HTTP parsing, keep-alive and
streaming responses are its job, and it runs on asyncio without a thread of its own.)
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.log import server_logger

from agora.common.credentials import peer_certificate_principal
from agora.common.tokens import TokenBook

__all__ = ["HttpServer", "http_principal"]


def http_principal(request: web.Request, tokens: TokenBook | None = None) -> str:
    """The caller's principal: its client certificate's name over HTTPS, else the principal of
    its `Authorization: Bearer` token when `tokens` knows it (over HTTPS only: a token never
    travels in plaintext); "" (anonymous) else."""
    transport = request.transport
    if transport is None:
        return ""
    named = peer_certificate_principal(transport.get_extra_info("peercert"))
    if named or tokens is None or transport.get_extra_info("sslcontext") is None:
        return named
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ""
    return tokens.principal(token.strip()) or ""


class HttpServer:
    """An aiohttp site on `host:port` (port 0 picks a free one) serving `routes`."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: Iterable[web.AbstractRouteDef],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context  # None: plain HTTP
        self._app = web.Application()
        self._app.add_routes(list(routes))
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Starts serving and returns the bound port."""
        # access_log=None: a scraped or polled endpoint would fill the daemon's log otherwise.
        self._runner = web.AppRunner(self._app, access_log=None, logger=_BadRequestsInOneLine())
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the bound port, for port 0
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.address}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class _BadRequestsInOneLine(logging.LoggerAdapter):
    """aiohttp's server logger, but a request that is not HTTP/1 (a gRPC client given the
    dashboard's port: HTTP/2's preface "PRI * HTTP/2.0") is one warning line, not a traceback."""

    def __init__(self) -> None:
        super().__init__(server_logger, {})

    def exception(self, msg, *args, exc_info=True, **kwargs) -> None:  # type: ignore[override]
        if isinstance(exc_info, BadHttpMessage):
            preface = "PRI" in str(exc_info)
            self.warning(
                "a client sent this HTTP port something that is not HTTP/1%s",
                " (HTTP/2: a gRPC client given the HTTP port instead of the gRPC one?)"
                if preface
                else f": {str(exc_info).splitlines()[0]}",
            )
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)
