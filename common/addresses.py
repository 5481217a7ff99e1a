"""Addresses a daemon gives out, checked so that they cannot be wrong silently.

An agent tells the master where clients reach it (for task logs and sandboxes). By default it
advertises the address it reaches the master from (`source_address_towards`), and the master
refuses an agent on another machine that advertises loopback (`loopback_advertised`), naming
the flags that fix it, rather than hand every client an address that only the agent's own
machine can use. A client that a framework daemon's published loopback address leaves without
an answer is told so (`loopback_published`), rather than that nothing runs there.
"""

from __future__ import annotations

import socket
from urllib.parse import unquote

from agora.common.credentials import is_loopback

__all__ = ["loopback_advertised", "loopback_published", "peer_host", "source_address_towards"]


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string (`context.peer()`): "ipv4:10.0.0.2:41234" -> "10.0.0.2",
    "ipv6:[::1]:41234" (or its %5B..%5D form) -> "::1"; "" for a peer with no IP (unix:...)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6"):
        return ""
    host = rest.rpartition(":")[0] if rest.count(":") and not rest.endswith("]") else rest
    return host.strip("[]")


def source_address_towards(address: str) -> str | None:
    """The local IP this machine sends from to reach `address` ("host:port"): what a peer
    there sees and can answer. None when the name does not resolve or there is no route. No
    packet is sent (a UDP socket's connect only picks the route)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port or 0), type=socket.SOCK_DGRAM)
    except (OSError, ValueError, UnicodeError):
        return None
    for family, kind, proto, _, target in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(target)
                return str(probe.getsockname()[0])
        except OSError:
            continue
    return None


def loopback_advertised(peer: str, advertised: str) -> str | None:
    """Why an agent dialling from `peer` (a gRPC peer string) may not advertise `advertised`
    ("host:port"): a loopback address from another machine reaches nothing but that client's
    own machine. None when it may (the agent is on this machine, or advertises a real address).
    """
    host = advertised.rpartition(":")[0].strip("[]") if ":" in advertised else advertised
    came_from = peer_host(peer)
    if not came_from or is_loopback(came_from) or not is_loopback(host):
        return None
    return (
        f"this agent dials from {came_from} but advertises {advertised}, which no other machine "
        f"reaches (task logs and sandboxes would fail): start it with --host {came_from} "
        "(where its Agent service listens; without --host it listens on the address it reaches "
        "the master from) or give --advertise-ip an address other machines reach it at"
    )


def loopback_published(published: str, master: str, command: str) -> str | None:
    """Why the daemon `command` starts (`agora batch`), found at `published` through the master
    at `master`, does not answer this client: it published a loopback address, which only its
    own machine reaches, while the master is on another machine than this one. None when that
    is not the case (then the daemon may well be down)."""
    host = published.rpartition(":")[0].strip("[]")
    if not is_loopback(host):
        return None
    first = master.removeprefix("zk://").split("/", 1)[0].split(",")[0]
    if is_loopback(first.rpartition(":")[0]):
        return None
    source = source_address_towards(first)
    if source is None or is_loopback(source):
        return None
    return (
        f"`{command}` published {published} to the master: a loopback address, which only its "
        f"own machine reaches. Restart it with --host set to its machine's address (one this "
        f"machine reaches), with TLS or --insecure"
    )
