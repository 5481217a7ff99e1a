"""Finding the Services API through the master (clients need only the master's address)."""

from __future__ import annotations

import grpc
from agora.v1 import operator_pb2, operator_pb2_grpc

from common.rpc import CHANNEL_OPTIONS


class ServicesNotFound(LookupError):
    """No service framework has published its address to the master (or it is unreachable)."""


def find_services_address(master: str, name: str = "services", timeout: float = 5.0) -> str:
    """The service_address of the framework called `name`: a connected one first, then the
    most recently registered."""
    with grpc.insecure_channel(master, options=CHANNEL_OPTIONS) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        try:
            reply = stub.ListFrameworks(operator_pb2.ListFrameworksRequest(), timeout=timeout)
        except grpc.RpcError as e:
            raise ServicesNotFound(f"cannot reach the master at {master}: "
                                   f"{e.details() or e.code().name}") from None
    candidates = [f for f in reply.frameworks
                  if f.info.name == name and f.info.service_address]
    if not candidates:
        raise ServicesNotFound(
            f"no {name!r} framework is registered with the master at {master}; "
            f"start one with `agora services --master {master}`")
    best = max(candidates, key=lambda f: (f.connected, f.registered_at))
    return best.info.service_address
