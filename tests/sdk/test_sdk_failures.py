"""The driver names why it cannot subscribe, once (issue 32): a framework without certificates
against a TLS master hears "speaks TLS: give --tls-ca ..." at warning the first time, and the
retries (with backoff) only at debug; not "Socket closed" at every retry. A real TLS gRPC
server on loopback and the real transport."""

from __future__ import annotations

import asyncio
import random

import structlog
from harness import eventually_async

from agora.common.backoff import Backoff
from agora.common.certificates import init_ca, issue
from agora.common.credentials import INSECURE, Credentials
from agora.common.rpc import bind, new_server
from agora.frameworks.sdk import Framework
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
