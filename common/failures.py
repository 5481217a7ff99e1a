"""Why a connection to an Agora daemon failed, named for people: the one classifier.

gRPC reports nearly every way of not getting through as UNAVAILABLE with a line of text from
its core. `classify` reads that text (and the code) and names the cause a person can act on:

    REFUSED        nothing listens there (connection refused)
    UNREACHABLE    no answer: a firewall, a wrong address, a machine that is down (timeout,
                   no route to host, network unreachable)
    TLS            one side speaks TLS and the other does not, or a certificate is not taken
    WRONG_SERVICE  something answers, but not the service asked for (an HTTP/1 server such as
                   the dashboard's port, or a gRPC server without that service: UNIMPLEMENTED)
    DNS            the name does not resolve
    DENIED         the daemon refused the caller (PERMISSION_DENIED or UNAUTHENTICATED); its
                   message names the principal and the ACL action
    OTHER          anything else: the code and the daemon's own words

The agent's link, the SDK's driver, the relay and every CLI command use it, so one cause reads
the same everywhere. `RepeatFilter` decides how loudly a retrying loop logs a failure: once at
warning when its cause (or the daemon's words) is new, then quietly until it changes.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from agora.common.credentials import INSECURE, Credentials, handshake_refusal

__all__ = ["Cause", "Failure", "Recently", "RepeatFilter", "classify", "classify_error"]


class Cause(enum.Enum):
    REFUSED = "connection refused"
    UNREACHABLE = "no answer"
    TLS = "TLS"
    WRONG_SERVICE = "wrong service"
    DNS = "name does not resolve"
    DENIED = "refused by the daemon"
    OTHER = "error"


@dataclass(frozen=True)
class Failure:
    cause: Cause
    message: str  # one line: what happened and what to do, naming the address

    def __str__(self) -> str:
        return self.message


_DNS_WORDS = ("domain name not found", "dns resolution failed", "hostname lookup", "resolving")
_HTTP1_WORDS = ("http1.x server", "expected settings frame", "failed parsing http/2")
_UNREACHABLE_WORDS = (
    "timed out",
    "timeout",
    "no route to host",
    "network is unreachable",
    "host is unreachable",
    "deadline exceeded",
)


def classify(
    code: grpc.StatusCode | None,
    details: str,
    address: str,
    credentials: Credentials = INSECURE,
    *,
    what: str = "the master",
    service: str = "",
) -> Failure:
    """The cause of a failed call to `what` at `address`, from its status `code` and `details`
    (None for an exception that is not a gRPC status: its text is the details). `service`
    names the gRPC service called, for the UNIMPLEMENTED case."""
    text = details or (code.name if code is not None else "")
    low = text.lower()
    where = f"{what} at {address}"
    if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        return Failure(Cause.DENIED, f"{where} refused this caller: {text} ({code.name})")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        serves = f" the {service} service" if service else " this call"
        return Failure(
            Cause.WRONG_SERVICE,
            f"{address} speaks gRPC but does not serve{serves}: it is not {what}'s port "
            "(another daemon's, such as an agent's or a framework's?)",
        )
    if any(w in low for w in _DNS_WORDS):
        host = address.rpartition(":")[0] or address
        return Failure(
            Cause.DNS,
            f"cannot reach {where}: the name {host!r} does not resolve (DNS); check the "
            "spelling, or give an IP address",
        )
    if any(w in low for w in _HTTP1_WORDS):
        return Failure(
            Cause.WRONG_SERVICE,
            f"{address} answers HTTP/1, not gRPC: it is not {what}'s gRPC port (the dashboard's "
            "or the metrics' port?); the master's gRPC port is its --port (default 5050)",
        )
    refusal = handshake_refusal(text, address, credentials)
    if refusal is not None:
        return Failure(Cause.TLS, refusal)
    if not credentials.secure and "ssl" in low and "handshake" not in low:
        return Failure(Cause.TLS, f"{address} speaks TLS: give --tls-ca (see `agora tls`)")
    if credentials.secure and ("wrong_version" in low or "wrong version" in low):
        return Failure(
            Cause.TLS,
            f"{address} does not speak TLS: drop --tls-ca/--tls-cert/--tls-key for it, or give "
            "the right address",
        )
    if "connection refused" in low:
        return Failure(
            Cause.REFUSED,
            f"cannot reach {where} (connection refused): nothing listens there. Is it running, "
            "on an address this machine reaches?"
            + (
                " (a master started without --host listens on 127.0.0.1 only; set --master or "
                "$AGORA_MASTER)"
                if what == "the master"
                else ""
            ),
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED or any(w in low for w in _UNREACHABLE_WORDS):
        return Failure(
            Cause.UNREACHABLE,
            f"cannot reach {where} (no answer: {_short(text)}): a firewall, a wrong address, or "
            "a machine that is down?",
        )
    name = code.name if code is not None else "error"
    if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT):
        return Failure(Cause.OTHER, f"{where} refused it: {text} ({name})")
    return Failure(Cause.OTHER, f"{where}: {text} ({name})" if text != name else f"{where}: {name}")


def classify_error(
    error: BaseException,
    address: str,
    credentials: Credentials = INSECURE,
    *,
    what: str = "the master",
    service: str = "",
) -> Failure:
    """`classify` for an exception: a gRPC error (sync or asyncio), anything with a gRPC `code`
    and a `message` (the SDK's SchedulerError), or any other exception by its text."""
    code: grpc.StatusCode | None = None
    details = str(error) or type(error).__name__
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        code, details = error.code(), error.details() or ""  # type: ignore[attr-defined]
    elif isinstance(getattr(error, "code", None), grpc.StatusCode):
        code, details = error.code, str(getattr(error, "message", "") or "")  # type: ignore[attr-defined]
    elif isinstance(error, TimeoutError):
        details = details if details != "TimeoutError" else "timed out"
    return classify(code, details, address, credentials, what=what, service=service)


def _short(text: str, width: int = 120) -> str:
    text = text.split("last error: ", 1)[-1]
    return text if len(text) <= width else text[: width - 3] + "..."


class RepeatFilter:
    """How loudly a retrying loop should log its latest failure: "warning" the first time a
    cause (with the daemon's words, for a refusal) is seen, "info" once every `remind` seconds
    while it lasts (so a loop that still fails is not silent for ever), "debug" otherwise.
    `reset()` after a success. The clock is injected for tests."""

    def __init__(self, remind: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.remind = remind
        self._clock = clock
        self._last: tuple[Cause, str] | None = None
        self._said_at = 0.0
        self.repeats = 0  # failures of the current kind not logged at warning

    def level(self, failure: Failure) -> str:
        # A refusal by its words (another principal, another action); the rest by cause: the
        # text of a timeout or a closed socket varies from one attempt to the next.
        key = (failure.cause, failure.message if failure.cause is Cause.DENIED else "")
        now = self._clock()
        if key != self._last:
            self._last, self._said_at, self.repeats = key, now, 0
            return "warning"
        self.repeats += 1
        if now - self._said_at >= self.remind:
            self._said_at = now
            return "info"
        return "debug"

    def reset(self) -> None:
        self._last = None
        self.repeats = 0


class Recently:
    """For a daemon that hears the same refusal again and again (an agent retrying with a
    certificate the ACLs refuse): `say(key)` is None while `key` was said less than `window`
    seconds ago, else how many times it came unsaid since (0 the first time), and it counts as
    said now. Remembers at most `limit` keys (the oldest said are forgotten first)."""

    def __init__(
        self, window: float = 60.0, clock: Callable[[], float] = time.monotonic, limit: int = 1000
    ) -> None:
        self.window = window
        self._clock = clock
        self._limit = limit
        self._said: dict[object, tuple[float, int]] = {}  # key -> (said at, unsaid since)

    def say(self, key: object) -> int | None:
        now = self._clock()
        said = self._said.pop(key, None)
        if said is not None and now - said[0] < self.window:
            self._said[key] = (said[0], said[1] + 1)
            return None
        if len(self._said) >= self._limit:
            del self._said[next(iter(self._said))]
        self._said[key] = (now, 0)
        return said[1] if said is not None else 0
