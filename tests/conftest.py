"""Fixtures shared across the suite's folders."""

from __future__ import annotations

import pytest

from agora.common.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper per test process (xdist worker); tests keep apart by their own path."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()
