"""Throwaway network namespaces: several "hosts" on one machine, joined by a bridge.

The master's namespace holds a bridge; every other host gets a veth pair whose far end sits in
the bridge. Addresses come from 10.(200+n).0.0/24 inside these namespaces only, which nothing
outside them can reach. Everything is removed on exit, even when a test fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field


def netns_unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if not shutil.which("ip"):
        return "iproute2's `ip` is not installed (make system-deps installs it)"
    probe = f"agora-probe-{secrets.token_hex(3)}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"this machine forbids network namespaces: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@dataclass
class Hosts:
    """Namespaces named `<prefix>-<host>`; `address[host]` is each host's IP on the bridge."""

    names: list[str]
    prefix: str = field(default_factory=lambda: f"ag{secrets.token_hex(3)}")
    subnet: int = field(default_factory=lambda: 200 + secrets.randbelow(50))
    address: dict[str, str] = field(default_factory=dict)

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host)]

    def __enter__(self) -> Hosts:
        try:
            self._create()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _create(self) -> None:
        hub = self.names[0]
        for host in self.names:
            subprocess.run(["ip", "netns", "add", self.ns(host)], check=True)
            _ip("link", "set", "lo", "up", ns=self.ns(host))
        bridge = "br0"
        _ip("link", "add", bridge, "type", "bridge", ns=self.ns(hub))
        _ip("link", "set", bridge, "up", ns=self.ns(hub))
        for i, host in enumerate(self.names, start=1):
            self.address[host] = f"10.{self.subnet}.0.{i}"
            # veth names are limited to 15 characters and live in the root namespace briefly.
            here, there = f"{self.prefix}h{i}", f"{self.prefix}b{i}"
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", here, "netns", self.ns(host))
            _ip("link", "set", there, "netns", self.ns(hub))
            _ip("link", "set", there, "master", bridge, ns=self.ns(hub))
            _ip("link", "set", there, "up", ns=self.ns(hub))
            _ip("addr", "add", f"{self.address[host]}/24", "dev", here, ns=self.ns(host))
            _ip("link", "set", here, "up", ns=self.ns(host))

    def __exit__(self, *exc) -> None:
        for host in self.names:
            # Deleting a namespace deletes the veth ends inside it, and so their peers.
            subprocess.run(["ip", "netns", "del", self.ns(host)], capture_output=True)
