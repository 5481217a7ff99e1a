"""`agora bench streams`: what an open gRPC stream costs a Python (grpc.aio) server in memory
with nothing of Agora's on it, the floor under the master's memory per agent.

The server is the master's transport and nothing more: the same server options (common/rpc.py),
one bidirectional stream per client, read in its handler as the master's AgentLink reads an
agent's (master/agent_link_service.py), one empty message sent back (as the master answers a
registration), which tells the client its stream is open. The clients run in child processes
(5,000 streams each, as a fleet process carries 5,000 agents), `per_channel` streams to a
channel as the emulated fleets have them. The server's RSS is read before the clients connect
and once every stream has delivered its first message; the difference over the number of
streams is what each costs gRPC's C core and its asyncio layer.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import time

import grpc
import psutil

from agora.common.rpc import SERVER_OPTIONS

SERVICE, METHOD = "agora.bench.Streams", "Open"
CLIENT_MODULE = "agora.experiments.bench_streams"  # run as the clients' processes
# Streams one client process opens (as a fleet process carries 5,000 agents).
STREAMS_PER_PROCESS = 5000
OPEN_ATTEMPTS = 5  # per stream (see _clients)
ANSWER_SECONDS = 10.0  # for the server's answer on a new stream


class BenchError(RuntimeError):
    """The benchmark could not run; the message says why."""


def run_streams_bench(streams: int, per_channel: int = 100, timeout: float = 300.0) -> dict:
    """Opens `streams` streams to a bare grpc.aio server; returns its RSS figures."""
    if streams < 1 or per_channel < 1:
        raise BenchError("streams and per_channel must be 1 or more")
    return asyncio.run(_serve(streams, per_channel, timeout))


async def _serve(streams: int, per_channel: int, timeout: float) -> dict:
    opened = closed = 0

    async def handler(request_iterator, context: grpc.aio.ServicerContext) -> None:
        nonlocal opened, closed
        first = True
        try:
            while True:
                message = await context.read()
                if message is grpc.aio.EOF:
                    return
                if first:  # answered, so the client knows its stream is open
                    await context.write(b"")
                    opened += 1
                    first = False
        except Exception:  # noqa: BLE001 - the client went away: the stream is over
            return
        finally:
            closed += 1

    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(handler)}
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    me = psutil.Process()
    clients: list[subprocess.Popen] = []
    try:
        await asyncio.sleep(0.5)
        gc.collect()
        before = me.memory_info().rss
        started = time.monotonic()
        target = f"127.0.0.1:{port}"
        # One client process at a time, each opening its streams one after another.
        for first in range(0, streams, STREAMS_PER_PROCESS):
            count = min(STREAMS_PER_PROCESS, streams - first)
            argv = [sys.executable, "-m", CLIENT_MODULE, target, str(count), str(per_channel)]
            clients.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL))
            while opened < first + count:
                if clients[-1].poll() is not None:
                    raise BenchError(f"a client process exited ({clients[-1].returncode})")
                if time.monotonic() - started > timeout:
                    raise BenchError(f"only {opened} of {streams} streams opened in {timeout:g} s")
                await asyncio.sleep(0.1)
        open_seconds = time.monotonic() - started
        await asyncio.sleep(2.0)  # let the last completions settle
        gc.collect()
        after = me.memory_info().rss
    finally:
        for client in clients:
            client.kill()
            client.wait()
        # Every handler returns once its connection is gone; stopping first would cancel them.
        deadline = time.monotonic() + 10.0
        while closed < opened and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await server.stop(0)
    return {
        "streams": streams,
        "streams_per_connection": per_channel,
        "open_seconds": round(open_seconds, 2),
        "rss_mb_before": round(before / 2**20, 1),
        "rss_mb_open": round(after / 2**20, 1),
        "kb_per_stream": round((after - before) / 1024 / streams, 2),
    }


async def _clients(target: str, streams: int, per_channel: int) -> None:
    """The child: opens the streams (one message each, answered), then waits to be killed."""
    options = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own per channel
    count = -(-streams // per_channel)
    channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(count)]
    calls = [await _open(channels[i // per_channel]) for i in range(streams)]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until killed
    del calls  # held until here: a call dropped is a stream ended


async def _open(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamCall:
    """One stream, open at both ends: the server has answered its first message (a write
    alone can succeed on a stream the server never sees). Now and then, thousands of streams
    opened back to back fail one with INTERNAL on this machine, or it is never answered; the
    bench measures open streams, so such a stream is opened again."""
    for _ in range(OPEN_ATTEMPTS):
        call = channel.stream_stream(f"/{SERVICE}/{METHOD}")()
        try:
            await call.write(b"x" * 64)
            if await asyncio.wait_for(call.read(), ANSWER_SECONDS) is not grpc.aio.EOF:
                return call
        except (grpc.aio.AioRpcError, TimeoutError):
            pass
        call.cancel()
        await asyncio.sleep(0.05)
    raise RuntimeError(f"a stream did not open in {OPEN_ATTEMPTS} attempts")


if __name__ == "__main__":
    asyncio.run(_clients(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
