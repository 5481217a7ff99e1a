"""Fixtures shared across the suite's folders."""

from __future__ import annotations

import os
import tempfile

import pytest

from agora.common.zookeeper_server import ZooKeeperServer

# Agents run tasks in namespaces of their own by default, each with a private /tmp: a file a
# test shares with its tasks outside their sandboxes (a gate, a marker) must not be under /tmp,
# so the tests' temporary directories (tmp_path, and the daemons' own) are under /var/tmp.
if os.access("/var/tmp", os.W_OK):
    os.environ["TMPDIR"] = "/var/tmp"
    tempfile.tempdir = None


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper per test process (xdist worker); tests keep apart by their own path."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()
