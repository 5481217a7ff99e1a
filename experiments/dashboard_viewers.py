"""People watching the dashboard, for experiments: `python -m agora.experiments.dashboard_viewers`.

Each viewer polls every page's API once per refresh period (the page itself polls only the one
it shows, every 2 s), so N viewers here are a heavier load than N open browsers. They run in a
process of their own, so their CPU is not the runner's. On SIGTERM the process writes what it
fetched (requests, errors, the slowest answer) to --stats as JSON and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp

PATHS = (
    "/api/overview",
    "/api/shares",
    "/api/agents",
    "/api/frameworks",
    "/api/tasks",
    "/api/roles",
)


class Counts:
    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.slowest_ms = 0.0


async def _viewer(session: aiohttp.ClientSession, url: str, interval: float, counts: Counts):
    while True:
        for path in PATHS:
            started = time.monotonic()
            try:
                async with session.get(url + path) as reply:
                    await reply.read()
                    counts.requests += 1
                    if reply.status != 200:
                        counts.errors += 1
            except aiohttp.ClientError:
                counts.errors += 1
            counts.slowest_ms = max(counts.slowest_ms, (time.monotonic() - started) * 1000)
        await asyncio.sleep(interval)


async def _main(url: str, viewers: int, interval: float, stats: Path) -> None:
    counts = Counts()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        tasks = []
        for _ in range(viewers):
            tasks.append(asyncio.create_task(_viewer(session, url, interval, counts)))
            await asyncio.sleep(interval / viewers)  # spread the viewers over the period
        print(json.dumps({"event": "ready", "viewers": viewers}), flush=True)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    stats.write_text(
        json.dumps(
            {
                "viewers": viewers,
                "seconds": round(time.monotonic() - started, 3),
                "requests": counts.requests,
                "errors": counts.errors,
                "slowest_ms": round(counts.slowest_ms, 2),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the dashboard, e.g. http://127.0.0.1:5080")
    parser.add_argument("--viewers", type=int, default=1)
    parser.add_argument("--interval", type=float, default=2.0, help="refresh period (s)")
    parser.add_argument("--stats", type=Path, required=True, help="JSON written on exit")
    args = parser.parse_args()
    asyncio.run(_main(args.url.rstrip("/"), args.viewers, args.interval, args.stats))


if __name__ == "__main__":
    main()
