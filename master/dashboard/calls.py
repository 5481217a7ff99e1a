"""How the dashboard calls a framework's API (batch, services): its errors as HTTP statuses,
its messages as the page may show them, and the owner's rule for a change relayed by the master.

The batch and service frameworks record who owns a job, a schedule or an app in the label
`agora.owner` and let that principal alone change it. The dashboard checks its caller against
that owner first, then calls with the master's certificate, naming the caller in the metadata
`agora-on-behalf-of`; a framework that does not take that word from the master refuses, and the
page then says which command the owner can run instead. Under TLS an anonymous caller's action
is not relayed at all: nameless, it would be the master's own.
"""

from __future__ import annotations

import grpc
from google.protobuf.json_format import MessageToDict

from agora.common.ownership_names import ON_BEHALF_OF, OWNER_LABEL
from agora.common.redaction import without_environments

CALL_TIMEOUT = 5.0


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_HTTP_STATUS = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.UNAVAILABLE: 503,
}


def http_status(code: grpc.StatusCode) -> int:
    return _HTTP_STATUS.get(code, 500)


def shown(message) -> dict:
    """A job, a schedule or an app as JSON for the page, its environment values hidden."""
    return MessageToDict(without_environments(message), preserving_proto_field_name=True)


async def call(what: str, method, request, metadata=None):
    """One call; a refusal (unknown, invalid, not allowed, not now) is an ApiError with the
    API's own message, anything else a 502 saying `what` did not answer."""
    try:
        return await method(request, timeout=CALL_TIMEOUT, metadata=metadata)
    except grpc.aio.AioRpcError as e:
        if e.code() in (
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.FAILED_PRECONDITION,
        ):
            raise ApiError(http_status(e.code()), e.details() or e.code().name) from None
        raise ApiError(502, f"{what} did not answer: {e.details() or e.code().name}") from None


def check_owner(principal: str, action: str, what: str, labels) -> None:
    """403 unless `principal` owns the thing whose labels these are (or no one does)."""
    owner = labels.get(OWNER_LABEL, "")
    if owner and principal != owner:
        who = principal or "an anonymous caller"
        raise ApiError(403, f"{who} may not {action} {what}, which {owner} owns")


async def relayed(what: str, method, request, principal: str, instead: str, *, secure: bool):
    """`method(request)` called by the master for `principal`; if the framework refuses the
    master, the 403 says so and what the owner can do `instead` (a sentence). `secure`: the
    master runs TLS, where the framework knows the master's certificate from anyone's."""
    if secure and not principal:
        # Relayed without a name, the call would be the master's own: the framework would
        # check the master's rights (e.g. set_weights) instead of the caller's.
        raise ApiError(
            403,
            f"an anonymous caller may not act through the dashboard on {what}: present a "
            "client certificate (the master relays an action only for a caller it can name)",
        )
    metadata = ((ON_BEHALF_OF, principal),) if principal else None
    try:
        return await call(what, method, request, metadata=metadata)
    except ApiError as e:
        if e.status != 403:
            raise
        # A framework older than relayed calls knows only the master's certificate.
        raise ApiError(403, f"{what} refused the master: {e} ({instead})") from None
