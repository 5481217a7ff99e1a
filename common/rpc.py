"""gRPC plumbing shared by every daemon: standard services, channels, address parsing."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable

import grpc

from agora.common.batches import Batcher
from agora.common.credentials import INSECURE, Credentials, add_port, aio_channel
from agora.common.tokens import TokenAuth

# Keepalives so a dead peer (a SIGKILLed agent, a partitioned or stopped master) is noticed in
# 10-15 s rather than at the TCP timeout, and large offers fit. A registered agent hears nothing
# from an idle master (master/server.py), so pings must keep going with no data in between:
# gRPC's default spaces such pings 5 minutes apart.
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_time_between_pings_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
]


def new_server(
    interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
    credentials: Credentials = INSECURE,
    on_auth_failure=None,
    gate: grpc.aio.ServerInterceptor | None = None,
    max_receive_bytes: int | None = None,
) -> grpc.aio.Server:
    """A server for an Agora daemon; with --tokens (`credentials.tokens`) every call must carry
    a known bearer token (common.tokens.TokenAuth), checked before any other interceptor.
    `on_auth_failure(reason, method)` counts a refusal; each is logged here. Every request's
    ids and names are bounded before a handler sees them (common.request_limits), after the
    caller's `interceptors` (which may count the refusal). `gate` (common.call_gate) goes
    first after the token check: it refuses before a request is read. `max_receive_bytes`:
    the largest request any call may send (default 64 MB)."""
    from agora.common.request_limits import RequestLimits

    chain = [*([gate] if gate is not None else []), *interceptors, RequestLimits()]
    if credentials.tokens is not None:
        import structlog  # here: a client of this module logs nothing, and never loads it

        from agora.common.failures import Recently

        log = structlog.get_logger(__name__)
        said = Recently()  # a caller retrying with a bad token is said once a minute

        def failed(reason: str, method: str) -> None:
            unsaid = said.say((reason, method))
            if unsaid is not None:
                extra = {"repeated": unsaid} if unsaid else {}
                log.warning("authentication failed", reason=reason, method=method, **extra)
            if on_auth_failure is not None:
                on_auth_failure(reason, method)

        chain.insert(0, TokenAuth(credentials.tokens, failed))
    options = list(SERVER_OPTIONS)
    if max_receive_bytes is not None:
        options = [o for o in options if o[0] != "grpc.max_receive_message_length"]
        options.append(("grpc.max_receive_message_length", max_receive_bytes))
    if gate is not None:
        # The gate refuses before a request is read; gRPC must not have read it anyway. With
        # its bandwidth-delay probe a connection's window grows to megabytes a stream, and 16
        # refused 60 MB calls still peaked the master at +150 MB; without, it reads 64 KB a
        # stream ahead (+2 MB). On loopback a 4 MB request took the same 10 ms either way.
        options.append(("grpc.http2.bdp_probe", 0))
    return grpc.aio.server(options=options, interceptors=chain)


def bind(server: grpc.aio.Server, where: str, credentials: Credentials = INSECURE) -> int:
    """Adds a port ("host:port"), with TLS when `credentials` are secure; returns the port
    bound; OSError if it cannot be."""
    return add_port(server, where, credentials)


def add_standard_services(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serves grpc.health.v1 (every service SERVING) and reflection (v1alpha and v1), for
    generic tools (agora.common.standard_services)."""
    # Loaded here, by daemons only: clients import this module and never serve either.
    from agora.common.standard_services import add_standard_services as add

    add(server, service_names)


def service_name(pb2_module, service: str) -> str:
    return pb2_module.DESCRIPTOR.services_by_name[service].full_name


def insecure_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


# For the channels that dial a master again and again while it restarts (the agent's link, the
# SDK): our own jittered backoff decides when to dial. gRPC's subchannels, shared between
# channels to the same address, otherwise keep their own backoff (1 s growing to 120 s) and
# fail new calls with the last "connection refused" for that long after the master is back.
REDIAL_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    ("grpc.use_local_subchannel_pool", 1),
]


def open_channel(
    address: str, credentials: Credentials = INSECURE, *, redial: bool = False
) -> grpc.aio.Channel:
    """A channel to an Agora daemon, with TLS when `credentials` are secure; `redial`: one that
    dials a master that may be restarting (REDIAL_OPTIONS)."""
    return aio_channel(address, credentials, REDIAL_OPTIONS if redial else CHANNEL_OPTIONS)


def parse_address(text: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port` -> (host, port); raises ValueError with a message that says what to write."""
    host, sep, port = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise ValueError(f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:5050")
        return text, default_port
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: port {port!r} is not a number; write HOST:PORT") from None
    if not 0 <= number <= 65535 or not host:
        raise ValueError(f"{text!r} is not HOST:PORT with a port in 0-65535")
    return host.strip("[]"), number


async def read_first(context: grpc.aio.ServicerContext, timeout: float):
    """A stream's first message, or grpc.aio.EOF if it ends or says nothing for `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            return await context.read()
    except TimeoutError:
        return grpc.aio.EOF


async def drain_queue(outbox: asyncio.Queue, batcher: Batcher | None = None) -> AsyncIterator:
    """The request iterator of a client stream: what is put on `outbox`, until None. With a
    `batcher`, what queued while the last message was being written goes as one (when enabled).
    """
    waiting: deque = deque()
    ending = False
    while True:
        if not waiting:
            if ending:
                return
            message = await outbox.get()
            if message is None:
                return
            waiting.append(message)
        if batcher is not None:
            await batcher.settle(waiting[0])
        while not ending and not outbox.empty():
            message = outbox.get_nowait()
            if message is None:
                ending = True  # what came before it is still sent
            else:
                waiting.append(message)
        yield batcher.take(waiting) if batcher is not None else waiting.popleft()


def describe_rpc_error(error: Exception) -> str:
    """One line for a log: `UNAVAILABLE: Socket closed`, or the exception's own text."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error) or type(error).__name__
