"""The driver names why it cannot subscribe, once (issue 32): a framework without certificates
against a TLS master hears "speaks TLS: give --tls-ca ..." at warning the first time, and the
retries (with backoff) only at debug; not "Socket closed" at every retry. A real TLS gRPC
server on loopback and the real transport."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path

import structlog
from harness import eventually_async
from master_harness import start_master

from agora.common.backoff import Backoff
from agora.common.certificates import init_ca, issue
from agora.common.credentials import INSECURE, Credentials
from agora.common.rpc import bind, new_server
from agora.frameworks.sdk import Framework, FrameworkDaemon, StateStore
from agora.frameworks.sdk.driver import Driver, framework_info
from agora.frameworks.sdk.transport import GrpcSchedulerTransport


async def test_a_plaintext_framework_hears_the_master_speaks_tls_once(tmp_path):
    init_ca(tmp_path)
    issue(tmp_path, "master", "master", ["127.0.0.1"])
    tls = Credentials.load(
        tmp_path / "ca.pem", tmp_path / "master.pem", tmp_path / "master-key.pem"
    )
    server = new_server(credentials=tls)
    port = bind(server, "127.0.0.1:0", tls)
    await server.start()
    address = f"127.0.0.1:{port}"
    driver = Driver(
        Framework(),
        GrpcSchedulerTransport(address, credentials=INSECURE),
        framework_info("plain"),
        backoff=Backoff(initial=0.01, cap=0.05, rng=random.Random(1)),
    )

    def failures(logs) -> list[dict]:
        return [e for e in logs if e["event"].startswith("could not subscribe")]

    try:
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(driver.run())
            try:
                await eventually_async(
                    lambda: len(failures(logs)) >= 3, timeout=30, message="three attempts"
                )
            finally:
                driver.stop()
                await asyncio.wait_for(task, 10)
    finally:
        await server.stop(None)
    said = failures(logs)
    assert [e["log_level"] for e in said[:3]] == ["warning", "debug", "debug"]
    assert said[0]["cause"] == "TLS"
    assert f"{address} speaks TLS: give --tls-ca" in said[0]["event"]


@dataclass
class _Config:
    master: str
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    advertise_host: str | None = None
    name: str = "refused"
    role: str = "*"
    failover_timeout: float = 60.0

    @property
    def state_path(self) -> Path:
        return self.state_dir / "refused.sqlite3"

    def validate(self) -> None:
        pass


class _Daemon(FrameworkDaemon):
    """The smallest framework daemon (no API of its own), declining every offer."""

    kind = "refused"

    def _open(self, master) -> None:
        self.store = StateStore(self.config.state_path)
        self.scheduler = Framework()

    def _add_services(self, server) -> None:
        pass


async def test_a_framework_daemon_refused_by_the_acls_says_so_once_and_keeps_trying(tmp_path):
    acls = tmp_path / "acls.yaml"
    acls.write_text(
        "register_frameworks: [{principals: [batch], roles: [ANY]}]\n"
        "read_state: [{principals: [ANONYMOUS]}]\n"  # named, so its Subscribe is read
    )
    master = await start_master(tmp_path / "master", acls_path=acls)
    denials = master.metrics.denials.labels("register_framework")
    daemon = _Daemon(_Config(master=master.address, state_dir=tmp_path / "daemon"))
    try:
        with structlog.testing.capture_logs() as logs:
            await daemon.start()
            await eventually_async(
                lambda: denials._value.get() >= 3, timeout=30, message="three refusals"
            )
            # The ACL file re-read lets it in: it was never removed, only turned away.
            # Without TLS the daemon is anonymous: ANY does not name it, ANONYMOUS does.
            acls.write_text("register_frameworks: [{principals: [ANONYMOUS], roles: [ANY]}]\n")
            assert master.reload_acls()
            await eventually_async(
                lambda: daemon.driver and daemon.driver.connected, timeout=30, message="in"
            )
    finally:
        await daemon.stop()
        await master.stop()
    refused = [e for e in logs if e["event"].startswith("the master refused the subscription")]
    assert len(refused) >= 3
    assert [e["log_level"] for e in refused[:3]] == ["warning", "debug", "debug"]
    assert refused[0]["principal"] == "(anonymous)"
    assert refused[0]["acl_action"] == "register_frameworks"
    assert "may not register framework" in refused[0]["event"]
    assert not [e for e in logs if e["log_level"] == "error"]
    assert not [e for e in logs if "ended the framework" in e["event"]]
