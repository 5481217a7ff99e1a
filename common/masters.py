"""Where the masters are: one address, a list, or a ZooKeeper path they elect a leader under.

Every daemon and client takes the same `--master` forms (like Mesos' `--master`):

    host:5050                       one master
    h1:5050,h2:5050,h3:5050         several: ask any, and follow the one that leads
    zk://h1:2181,h2:2181/agora      ZooKeeper: the masters elect a leader under /agora

Pure: parsing, and the record (MasterInfo) each master publishes about itself. A malformed
value is a MasterSpecError whose message shows what to write.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = ["MasterInfo", "MasterSet", "MasterSpecError", "parse_masters"]

FORMS = "HOST:PORT, a list h1:5050,h2:5050, or zk://h1:2181,h2:2181/agora"


class MasterSpecError(ValueError):
    """A --master value that names no masters; the message says what to write."""


@dataclass(frozen=True)
class MasterSet:
    """The masters to reach: `addresses` (host:port each), or ZooKeeper `zk_hosts` + `zk_path`."""

    addresses: tuple[str, ...] = ()
    zk_hosts: str = ""  # "h1:2181,h2:2181", as kazoo takes it
    zk_path: str = ""  # "/agora"

    @property
    def uses_zookeeper(self) -> bool:
        return bool(self.zk_hosts)

    @property
    def single(self) -> str | None:
        """The address when exactly one master is named (nothing to elect or follow)."""
        return self.addresses[0] if len(self.addresses) == 1 and not self.zk_hosts else None

    def __str__(self) -> str:
        if self.zk_hosts:
            return f"zk://{self.zk_hosts}{self.zk_path}"
        return ",".join(self.addresses)


def _host_port(text: str, what: str, whole: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or host in ("[", "[]"):
        raise MasterSpecError(f"{whole!r}: {what} {text!r} has no port; write {FORMS}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise MasterSpecError(f"{whole!r}: {what} {text!r} needs a port in 1-65535")
    if host.startswith("[") != host.endswith("]"):
        raise MasterSpecError(f"{whole!r}: {what} {text!r}: write IPv6 hosts as [::1]:5050")
    if any(c in host for c in " /@?#"):
        raise MasterSpecError(f"{whole!r}: {what} {text!r} is not HOST:PORT")
    return f"{host}:{int(port)}"


def parse_masters(text: str) -> MasterSet:
    """The masters a --master value names."""
    whole = text
    text = text.strip()
    if not text:
        raise MasterSpecError(f"no master given; write {FORMS}")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme != "zk":
            raise MasterSpecError(f"{whole!r}: unknown scheme {scheme!r}; write {FORMS}")
        hosts, slash, path = rest.partition("/")
        if not slash or not path.strip("/"):
            raise MasterSpecError(
                f"{whole!r}: name the ZooKeeper path the masters use, e.g. zk://{hosts}/agora"
            )
        if not hosts:
            raise MasterSpecError(f"{whole!r}: name at least one ZooKeeper server host:port")
        servers = [_host_port(h, "ZooKeeper server", whole) for h in hosts.split(",")]
        path = "/" + path.strip("/")
        if "//" in path or any(part in (".", "..") for part in path.split("/")):
            raise MasterSpecError(f"{whole!r}: {path!r} is not a ZooKeeper path like /agora")
        return MasterSet(zk_hosts=",".join(servers), zk_path=path)
    addresses = [_host_port(a, "master", whole) for a in text.split(",")]
    if len(set(addresses)) != len(addresses):
        raise MasterSpecError(f"{whole!r} names a master twice")
    return MasterSet(addresses=tuple(addresses))


@dataclass(frozen=True)
class MasterInfo:
    """What a master publishes about itself in its election znode."""

    master_id: str
    address: str  # host:port where it serves gRPC
    started_at: float  # wall clock, seconds
    elected_at: float = 0.0  # when it became leader; 0 while standing by
    # Its election znode's sequence number plus one, read from the znode's name (not its
    # data): the leader's epoch; a later leader always has a higher one (0: no election).
    epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> MasterInfo:
        fields = json.loads(data)
        return cls(**{k: fields[k] for k in cls.__dataclass_fields__ if k in fields})
