"""Load frameworks of one run, in this (the runner's) process, each with its own SDK driver."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from frameworks.load import LoadConfig, LoadFramework, Recorder
from frameworks.load.timing import TimedTransport
from frameworks.sdk import Driver, SchedulerError, framework_info

log = structlog.get_logger(__name__)


class FrameworkSet:
    def __init__(self, master: str, configs: list[LoadConfig], recorder: Recorder) -> None:
        self.master = master
        self.recorder = recorder
        self.frameworks = [LoadFramework(c, recorder) for c in configs]
        self.drivers: list[Driver] = []
        self._runs: list[asyncio.Task] = []

    def start_one(self, framework: LoadFramework) -> Driver:
        info = framework_info(framework.config.name, role=framework.config.role,
                              failover_timeout=5.0)
        transport = TimedTransport(self.master, self.recorder, framework.config.name)
        driver = Driver(framework, transport, info)
        self.drivers.append(driver)
        self._runs.append(asyncio.create_task(driver.run(), name=framework.config.name))
        return driver

    def start(self) -> None:
        for framework in self.frameworks:
            self.start_one(framework)

    async def wait_subscribed(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(d.connected for d in self.drivers):
            if time.monotonic() > deadline:
                raise TimeoutError("load frameworks did not subscribe in time")
            for run in self._runs:
                if run.done() and run.exception() is not None:
                    raise run.exception()
            await asyncio.sleep(0.05)

    def stop_launching(self) -> None:
        for framework in self.frameworks:
            framework.stop_launching()

    async def stop(self, teardown: bool = True) -> None:
        """Tears each framework down (its tasks are killed, the master forgets it) and stops."""
        for framework, driver in zip(self.frameworks, self.drivers, strict=False):
            framework.stop_launching()
            await framework.close()
            if teardown and driver.connected:
                with contextlib.suppress(SchedulerError):
                    await asyncio.wait_for(driver.teardown(), 10)
            driver.stop()
        results = await asyncio.gather(*self._runs, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.warning("load framework ended with an error", error=repr(result))
