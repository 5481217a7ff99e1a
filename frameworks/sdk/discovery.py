"""Finding a framework's own API through the master: clients need only the master's address.

A framework daemon publishes where its API listens in FrameworkInfo.service_address; the
master's Operator.ListFrameworks hands it out. `master` may name a set of masters (a list, or
zk://); the leader is asked.
"""

from __future__ import annotations

import grpc

from agora.common.credentials import INSECURE, Credentials, sync_channel
from agora.common.failures import classify_error
from agora.common.leader import LeaderNotFound, find_leader
from agora.common.masters import MasterSpecError
from agora.common.rpc import CHANNEL_OPTIONS
from agora.v1 import operator_pb2, operator_pb2_grpc


class FrameworkNotFound(LookupError):
    """No framework of that name has published its address (or the master is unreachable)."""


def find_framework_api(
    master: str,
    name: str,
    *,
    timeout: float = 5.0,
    hint: str = "",
    error: type[FrameworkNotFound] = FrameworkNotFound,
    credentials: Credentials = INSECURE,
) -> str:
    """The service_address of the framework called `name`: a connected one first, then the
    most recently registered.

    Raises `error` when the master cannot be reached or no such framework has published an
    address; `hint` (say, how to start one) ends the second message.
    """
    try:
        # Any --master form: one address, a list, zk://; a standby names the leader.
        master = find_leader(master, credentials, timeout=timeout)
    except (LeaderNotFound, MasterSpecError) as e:
        raise error(str(e)) from None
    with sync_channel(master, credentials, CHANNEL_OPTIONS) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        try:
            reply = stub.ListFrameworks(operator_pb2.ListFrameworksRequest(), timeout=timeout)
        except grpc.RpcError as e:
            failure = classify_error(e, master, credentials, service="Operator")
            raise error(failure.message) from None
    candidates = [f for f in reply.frameworks if f.info.name == name and f.info.service_address]
    if not candidates:
        message = f"no {name!r} framework is registered with the master at {master}"
        raise error(f"{message}; {hint}" if hint else message)
    best = max(candidates, key=lambda f: (f.connected, f.registered_at))
    return best.info.service_address
