"""asyncio helpers the agent's components share."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancels the tasks and waits until they are done.

    Cancels again while one is still running: in Python 3.11 `asyncio.wait_for` can swallow a
    cancellation that arrives just as its inner awaitable completes.
    """
    pending = {t for t in tasks if t is not None}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
