"""Load frameworks of one run, in this (the runner's) process, each with its own SDK driver."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from agora.common.credentials import Credentials
from agora.experiments.load import LoadConfig, LoadFramework, Recorder
from agora.experiments.load.timing import TimedTransport
from agora.frameworks.sdk import Driver, SchedulerError, framework_info

log = structlog.get_logger(__name__)


class FrameworkSet:
    """`start()` subscribes them all; `start_one`/`stop_one` let frameworks come and go."""

    def __init__(
        self,
        master: str,
        configs: list[LoadConfig],
        recorder: Recorder,
        credentials: Credentials | None = None,
    ) -> None:
        self.master = master
        self.credentials = credentials  # mutual TLS to the master when given
        self.recorder = recorder
        self.frameworks = [LoadFramework(c, recorder) for c in configs]
        self.drivers: list[Driver | None] = [None] * len(self.frameworks)
        self._runs: list[asyncio.Task | None] = [None] * len(self.frameworks)

    def start_one(self, framework: LoadFramework) -> Driver:
        index = self.frameworks.index(framework)
        info = framework_info(
            framework.config.name, role=framework.config.role, failover_timeout=5.0
        )
        transport = TimedTransport(
            self.master, self.recorder, framework.config.name, self.credentials
        )
        driver = Driver(framework, transport, info)
        self.drivers[index] = driver
        self._runs[index] = asyncio.create_task(driver.run(), name=framework.config.name)
        return driver

    def start(self) -> None:
        for framework in self.frameworks:
            self.start_one(framework)

    async def wait_subscribed(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(d.connected for d in self.drivers if d is not None):
            if time.monotonic() > deadline:
                raise TimeoutError("load frameworks did not subscribe in time")
            for run in self._runs:
                if run is not None and run.done() and (error := run.exception()) is not None:
                    raise error
            await asyncio.sleep(0.05)

    def stop_launching(self) -> None:
        for framework in self.frameworks:
            framework.stop_launching()

    async def stop_one(self, framework: LoadFramework, teardown: bool = True) -> None:
        """Tears one framework down (its tasks are killed, the master forgets it) and stops."""
        index = self.frameworks.index(framework)
        driver, run = self.drivers[index], self._runs[index]
        if driver is None or run is None or run.done():
            return
        framework.stop_launching()
        await framework.close()
        if teardown and driver.connected:
            with contextlib.suppress(SchedulerError, TimeoutError):
                await asyncio.wait_for(driver.teardown(), 10)
        driver.stop()
        result = (await asyncio.gather(run, return_exceptions=True))[0]
        if isinstance(result, Exception):
            log.warning("load framework ended with an error", error=repr(result))

    async def stop(self, teardown: bool = True) -> None:
        for framework in self.frameworks:
            await self.stop_one(framework, teardown)
