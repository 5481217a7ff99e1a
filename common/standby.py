"""The stand-in server of a daemon that stands by for leadership on ZooKeeper (masters, and
the batch and services daemons run as highly available sets).

While it stands by, the daemon's port answers every call, whatever the service, with
UNAVAILABLE and the reason NOT_LEADER, naming the leader in the error's metadata, so that a
client pointed at any member finds the leader at once. Elected, the daemon stops this server and
starts its real one on the same port.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from agora.common.credentials import Credentials
from agora.common.errors import Reason, rich_status
from agora.common.rpc import bind, new_server

__all__ = ["StandbyServer", "not_leader_message"]


def not_leader_message(me: str, leader: str, what: str = "the master") -> str:
    if leader == me:
        return f"{what} at {me} is elected and starting to lead; retry in a moment"
    if leader:
        return f"{what} at {me} is standing by; the leader is {leader}"
    return f"{what} at {me} is standing by and no leader is elected yet; retry shortly"


class StandbyServer:
    """Serves a daemon's port while it stands by: every call, whatever the service, ends at
    once with UNAVAILABLE / NOT_LEADER and metadata {"leader": host:port or ""}. `what` names
    the daemon in the refusal ("the master", "the batch daemon")."""

    def __init__(
        self,
        host: str,
        port: int,
        credentials: Credentials,
        leader: Callable[[], str],
        what: str = "the master",
    ) -> None:
        self._address = f"{host}:{port}"
        self._what = what
        self._credentials = credentials
        self._leader = leader
        self.address = self._address
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        server = new_server()
        server.add_generic_rpc_handlers([_Refuse(self)])
        port = bind(server, self._address, self._credentials)
        await server.start()
        self._server = server
        self.address = f"{self._address.rpartition(':')[0]}:{port}"
        return port

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            # A moment's grace: refusals in flight complete instead of being cut (a call cut
            # mid-stream could leave its client waiting for an answer that never comes).
            await server.stop(0.1)

    def refusal(self) -> grpc.Status:
        leader = self._leader()
        return rich_status(
            grpc.StatusCode.UNAVAILABLE,
            not_leader_message(self.address, leader, self._what),
            Reason.NOT_LEADER,
            # "standby": refused unread, so a client may send even a change again.
            {"leader": leader, "standby": "yes"},
        )


class _Refuse(grpc.GenericRpcHandler):
    def __init__(self, standby: StandbyServer) -> None:
        self._standby = standby

    def service(self, handler_call_details):
        # A stream-stream handler serves a call of any shape: it refuses without reading.
        return grpc.stream_stream_rpc_method_handler(self._refuse)

    async def _refuse(self, requests, context):
        await context.abort_with_status(self._standby.refusal())
