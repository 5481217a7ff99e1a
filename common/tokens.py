"""Bearer tokens: a principal for a framework or a person for whom a certificate is impractical.

A token is 32 random bytes, written by `agora tls token` to a file only its holder reads (0600):
it is read from that file (`--token-file`, `AGORA_TOKEN_FILE`), never taken on a command line
where `ps` would show it, and never logged. A server given `--tokens FILE` knows only each
token's SHA-256, by principal:

    ops: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    analytics: sha256:...

Such a server takes a token on every call (gRPC metadata `authorization: Bearer ...`) and the
token's principal is the caller's, for the ACLs as a certificate's name would be. Over TLS it
then asks callers for no client certificate (Python's gRPC cannot ask for one without requiring
it), so in a token cluster agents and daemons present tokens too. A token travels only over TLS
or to a loopback address (common.credentials refuses otherwise).
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import inspect
import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

import grpc

__all__ = [
    "TokenBook",
    "TokenError",
    "TokenAuth",
    "digest",
    "new_token",
    "read_token_file",
    "token_principal",
    "write_token_file",
]

PREFIX = "sha256:"
_PRINCIPAL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agora_token_principal", default=None
)


class TokenError(ValueError):
    """An unusable token or tokens file; the message names the file and what to change."""


def new_token() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def digest(token: str) -> str:
    return PREFIX + hashlib.sha256(token.encode()).hexdigest()


def write_token_file(path: Path, token: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def read_token_file(path: str | Path) -> str:
    """The token in `path`; TokenError if it is missing, empty, or readable by others."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as e:
        raise TokenError(f"--token-file {path}: {e.strerror or e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(
            f"--token-file {path} can be read by others (mode {stat.S_IMODE(mode):o}): "
            f"chmod 600 {path}"
        )
    if not text or any(c.isspace() for c in text):
        raise TokenError(f"--token-file {path}: expected one token (see `agora tls token`)")
    return text


class TokenBook:
    """principal -> token digest, from a tokens file; answers who holds a token."""

    def __init__(self, by_digest: dict[str, str], source: str) -> None:
        self._by_digest = by_digest
        self.source = source

    @classmethod
    def load(cls, path: str | Path) -> TokenBook:
        import yaml  # only servers given --tokens read a tokens file

        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise TokenError(f"--tokens {path}: {e.strerror or e}") from None
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TokenError(f"--tokens {path}: not valid YAML or JSON ({first})") from None
        if not isinstance(data, dict) or not data:
            raise TokenError(f"--tokens {path}: write one 'principal: sha256:HEX' line per token")
        by_digest: dict[str, str] = {}
        for principal, value in data.items():
            if (
                not isinstance(principal, str)
                or not isinstance(value, str)
                or not value.startswith(PREFIX)
                or len(value) != len(PREFIX) + 64
            ):
                raise TokenError(
                    f"--tokens {path}: {principal!r}: give the token's digest as "
                    "sha256:HEX (what `agora tls token` prints), never the token itself"
                )
            by_digest[value.lower()] = principal
        return cls(by_digest, str(path))

    def principal(self, token: str) -> str | None:
        wanted = digest(token)
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, wanted):
                return principal
        return None


def token_principal() -> str | None:
    """The principal of the current call's token (set by TokenAuth), if any."""
    return _PRINCIPAL.get()


def _bearer(metadata) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer ") :].strip()
    return None


class TokenAuth(grpc.aio.ServerInterceptor):
    """Refuses every call without a known token (UNAUTHENTICATED, saying which); runs the
    others with the token's principal as the caller's (`token_principal`)."""

    # Health checks and reflection are open, as on a server without tokens.
    OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")

    def __init__(self, book: TokenBook, on_failure: Callable[[str, str], None] | None = None):
        self.book = book
        self._on_failure = on_failure  # (reason, method): log and count

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or details.method.startswith(self.OPEN):
            return handler
        token = _bearer(details.invocation_metadata)
        principal = self.book.principal(token) if token else None
        if principal is None:
            reason = "missing_token" if not token else "unknown_token"
            if self._on_failure is not None:
                self._on_failure(reason, details.method)
            message = (
                "this server needs a bearer token: give --token-file or $AGORA_TOKEN_FILE "
                "(see `agora tls token`)"
                if not token
                else "the bearer token is not one this server knows (see its --tokens file)"
            )
            return _refusal(handler, message)
        return _as_principal(handler, principal)


def _refusal(handler, message: str):
    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    # A coroutine works for every kind of method: a streaming one then writes nothing.
    return _replace(handler, lambda _behavior: refuse)


def _as_principal(handler, principal: str):
    def wrap(behavior):
        if inspect.isasyncgenfunction(behavior):

            async def stream(request, context):
                _PRINCIPAL.set(principal)
                async for reply in behavior(request, context):
                    yield reply

            return stream

        async def call(request, context):  # unary, or a stream written with context.write()
            _PRINCIPAL.set(principal)
            return await behavior(request, context)

        return call

    return _replace(handler, wrap)


def _replace(handler, wrap):
    """The handler with its behavior (whichever kind of method it serves) wrapped."""
    for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behavior = getattr(handler, kind)
        if behavior is not None:
            return handler._replace(**{kind: wrap(behavior)})
    return handler


class BearerInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    """Adds the token to every call of a plaintext (loopback) aio channel; over TLS the
    channel's call credentials do it."""

    def __init__(self, token: str) -> None:
        self._pair = ("authorization", f"Bearer {token}")

    def _details(self, details):
        metadata = list(details.metadata or ()) + [self._pair]
        return details._replace(metadata=metadata)

    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)

    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)

    async def intercept_stream_unary(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)

    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


class SyncBearerInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """The same for a blocking channel (grpc.intercept_channel)."""

    def __init__(self, token: str) -> None:
        self._pair = ("authorization", f"Bearer {token}")

    def _details(self, details):
        metadata = list(details.metadata or ()) + [self._pair]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)
