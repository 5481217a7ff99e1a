"""FrameworkDaemon, find_framework_api and StateStore against a real master on loopback."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest
from harness import eventually_async
from master_harness import start_master

from agora.frameworks.sdk import (
    Framework,
    FrameworkDaemon,
    FrameworkNotFound,
    StateStore,
    find_framework_api,
)


@dataclass
class EchoConfig:
    master: str
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    advertise_host: str | None = None
    name: str = "echo"
    role: str = "*"
    failover_timeout: float = 60.0

    @property
    def state_path(self) -> Path:
        return self.state_dir / "echo.sqlite3"

    def validate(self) -> None:
        pass


class Echo(Framework):
    """Declines every offer (the default); keeps its framework id, as a daemon's scheduler must."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    async def on_subscribed(self, driver, framework_id: str) -> None:
        self.store.set_framework_id(framework_id)


class EchoDaemon(FrameworkDaemon):
    """The smallest framework daemon: no API of its own beyond health and reflection."""

    kind = "echo"

    def _open(self, master) -> None:
        self.store = StateStore(self.config.state_path)
        self.scheduler = Echo(self.store)

    def _add_services(self, server) -> None:
        pass


@pytest.fixture
async def master(tmp_path):
    m = await start_master(tmp_path / "master")
    yield m
    await m.stop(0)


async def test_the_api_is_found_through_the_master_and_the_id_survives_a_restart(master, tmp_path):
    with pytest.raises(FrameworkNotFound, match="no 'echo' framework .*; start one"):
        await asyncio.to_thread(find_framework_api, master.address, "echo", hint="start one")

    config = EchoConfig(master=master.address, state_dir=tmp_path / "echo")
    daemon = EchoDaemon(config)
    await daemon.start()
    try:
        await eventually_async(lambda: daemon.driver and daemon.driver.connected, timeout=20)
        found = await asyncio.to_thread(find_framework_api, master.address, "echo")
        assert found == daemon.service_address == daemon.address
        framework_id = daemon.store.framework_id()
        assert framework_id.startswith("framework-")
    finally:
        await daemon.stop()
    await daemon.wait_closed()

    # A daemon restarted on the same state subscribes as the same framework.
    again = EchoDaemon(config)
    await again.start()
    try:
        await eventually_async(lambda: again.driver and again.driver.connected, timeout=20)
        assert again.store.framework_id() == framework_id
        assert again.driver.framework_id == framework_id
    finally:
        await again.stop()


async def test_a_taken_port_is_an_os_error(master, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = EchoDaemon(EchoConfig(master=master.address, state_dir=tmp_path, port=port))
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{port}: the address is in use"):
            await daemon.start()
