"""`agora bench hops`: how long a message takes across two bare grpc.aio hops, the floor under
the offer latency (issue 31) with nothing of Agora's on the way.

An offer's end-to-end latency (`agora experiment offer-latency`) is a terminal status update's
trip from an agent to the master, the master's work, and the OFFERS event's trip to a
framework: three processes, two gRPC hops. This benchmark is that shape with the master's work
left out: a sender process writes stamped messages on a bidirectional stream (as an agent's
AgentLink.Connect), this process's server reads each and writes it at once on a server stream
(as the master's Subscribe) to a reader process, which notes the wall clock on reading it. Same
server and channel options as the daemons (common/rpc.py), same host, so the two clocks are one.
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import time

import grpc

from agora.common.rpc import CHANNEL_OPTIONS, SERVER_OPTIONS
from agora.experiments.results import summarize

SERVICE = "agora.bench.Hops"
MODULE = "agora.experiments.bench_hops"  # run as the sender's and the reader's processes
STAMP = struct.Struct("<d")  # the sender's time.time() at the front of each message
START_SECONDS = 30.0  # for a child process to connect (a Python and grpc start-up)


class BenchError(RuntimeError):
    """The benchmark could not run; the message says why."""


def run_hops_bench(messages: int, rate: float, size: int) -> dict:
    """Sends `messages` of `size` bytes at `rate` a second across the two hops; the latencies."""
    if size < STAMP.size:
        raise BenchError(f"--size must be at least {STAMP.size} bytes (the stamp), got {size}")
    return asyncio.run(_run(messages, rate, size))


async def _run(messages: int, rate: float, size: int) -> dict:
    readers: list[asyncio.Queue] = []

    async def up(request_iterator, context: grpc.aio.ServicerContext) -> None:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            for queue in readers:
                queue.put_nowait(message)

    async def down(request: bytes, context: grpc.aio.ServicerContext) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        readers.append(queue)
        await context.write(b"")  # subscribed: the reader is ready when it reads this
        while True:
            await context.write(await queue.get())

    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Up": grpc.stream_stream_rpc_method_handler(up),
                    "Down": grpc.unary_stream_rpc_method_handler(down),
                },
            )
        ]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    target = f"127.0.0.1:{port}"
    started = time.monotonic()
    reader = _child("reader", target, str(messages))
    sender: subprocess.Popen | None = None
    try:
        while not readers:
            if reader.poll() is not None or time.monotonic() - started > START_SECONDS:
                raise BenchError(f"the reader did not subscribe ({_said(reader)})")
            await asyncio.sleep(0.05)
        sender = _child("sender", target, str(messages), repr(rate), str(size))
        loop = asyncio.get_running_loop()
        out, err = await loop.run_in_executor(None, _finish, reader, messages, rate)
        if reader.returncode != 0:
            raise BenchError(f"the reader failed: {err.strip() or reader.returncode}")
        latencies = json.loads(out)
    finally:
        for child in (reader, sender):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        await server.stop(0)
    return {
        "messages": messages,
        "received": len(latencies),
        "rate_per_second": rate,
        "bytes": size,
        "latency_ms": summarize(latencies),
    }


def _child(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(reader: subprocess.Popen, messages: int, rate: float) -> tuple[str, str]:
    """The reader's output once it has read every message, or BenchError if that takes
    START_SECONDS more than twice as long as sending them should (a message lost, a child
    stuck)."""
    try:
        return reader.communicate(timeout=START_SECONDS + 2 * messages / rate)
    except subprocess.TimeoutExpired:
        raise BenchError(f"the reader did not get all {messages} messages in time") from None


def _said(child: subprocess.Popen) -> str:
    if child.poll() is None:
        return "still starting"
    return (child.stderr.read() if child.stderr else "").strip() or f"exit {child.returncode}"


# --- the child processes ----------------------------------------------------------------------


async def _send(target: str, messages: int, rate: float, size: int) -> None:
    """Writes `messages` stamped messages on one stream, one every 1/rate s, then ends it."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        call = channel.stream_stream(f"/{SERVICE}/Up")()
        padding = b"x" * (size - STAMP.size)
        await call.write(STAMP.pack(time.time()) + padding)  # the warm-up, not counted
        for _ in range(messages):
            await asyncio.sleep(1 / rate)
            await call.write(STAMP.pack(time.time()) + padding)
        await call.done_writing()
        await call


async def _read(target: str, messages: int) -> list[float]:
    """Reads the subscription's answer, then the warm-up and `messages` messages: each one's
    latency in ms, from the sender's stamp to this read."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        call = channel.unary_stream(f"/{SERVICE}/Down")(b"")
        latencies: list[float] = []
        seen = -1  # the warm-up first
        async for message in call:
            now = time.time()
            if not message:
                continue  # the subscription's answer
            if seen >= 0:
                latencies.append((now - STAMP.unpack_from(message)[0]) * 1000)
            seen += 1
            if seen == messages:
                call.cancel()
                break
        return latencies


if __name__ == "__main__":
    role, address = sys.argv[1], sys.argv[2]
    if role == "sender":
        asyncio.run(_send(address, int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
    else:
        print(json.dumps(asyncio.run(_read(address, int(sys.argv[3])))))
