"""Finding a framework's own API through the master: clients need only the master's address.

A framework daemon publishes where its API listens in FrameworkInfo.service_address; the
master's Operator.ListFrameworks hands it out, with the principal that subscribed the framework.
`master` may name a set of masters (a list, or zk://); the leader is asked.

With TLS, the API is used only if its certificate names that same principal: a server that
merely holds some certificate of the cluster's CA is not the framework (a hostile framework
daemon would otherwise be sent jobs and their secrets). Reserving the names `batch` and
`services` for their daemons' principals in the master's ACLs (register_frameworks with
names:) keeps anyone else from registering a framework of those names at all.
"""

from __future__ import annotations

import grpc

from agora.common.credentials import INSECURE, Credentials, not_served_by, sync_channel
from agora.common.failures import classify_error
from agora.common.leader import LeaderNotFound, find_leader
from agora.common.masters import MasterSpecError
from agora.common.rpc import CHANNEL_OPTIONS
from agora.v1 import operator_pb2, operator_pb2_grpc

# The label a daemon of a highly available set (leadership.py) publishes in its FrameworkInfo
# (its zk:// URL): a client that finds its API through the master knows to wait out a failover.
SET_LABEL = "agora.set"


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
    found = find_framework(
        master, name, timeout=timeout, hint=hint, error=error, credentials=credentials
    )
    return found.info.service_address


def find_framework(
    master: str,
    name: str,
    *,
    timeout: float = 5.0,
    hint: str = "",
    error: type[FrameworkNotFound] = FrameworkNotFound,
    credentials: Credentials = INSECURE,
) -> operator_pb2.FrameworkSummary:
    """What the master knows of the framework `find_framework_api` picks (its info carries
    the address, and the labels a daemon of a highly available set publishes)."""
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
    principals = sorted({f.principal for f in candidates})
    if credentials.secure and len(principals) > 1:
        # Without a reservation anyone may take the name: which one is the real framework is
        # not for a client to guess (the newest would do for an impostor).
        raise error(
            f"frameworks named {name!r} were registered by several principals "
            f"({', '.join(p or '(anonymous)' for p in principals)}): not knowing which to "
            "trust, refusing all; reserve the name in the master's ACLs (register_frameworks "
            "with names:) or tear down the impostor"
        )
    best = max(candidates, key=lambda f: (f.connected, f.registered_at))
    if credentials.secure:
        why = not_served_by(
            best.info.service_address,
            best.principal,
            f"the {name!r} framework's API",
            credentials,
            timeout,
        )
        if why is not None:
            raise error(why)
    return best
