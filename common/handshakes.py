"""TLS handshake refusals, seen and counted: the one authentication failure Python cannot see.

gRPC checks a caller's certificate in the TLS handshake, in its C core, before any Python code
runs: a caller with no certificate, one of another CA or an expired one is turned away without a
call, and grpcio reports nothing to the server's Python. The core does log each failed handshake
(one line at INFO, "Handshake failed with error ... PEER_DID_NOT_RETURN_A_CERTIFICATE"). So a
daemon that serves TLS asks the core for INFO lines (GRPC_VERBOSITY, read when grpc is first
imported) and reads its own stderr through a pipe, both set up by `prepare()` before grpc is
imported; `watch(handler)` then names who logs and counts each refusal. The core's other INFO
lines are dropped; its warnings and errors and everything else pass through unchanged. (The line
names no peer: the core does not say who it was; the process's own failed dials show too.)
A process that filters must give its long-lived children a stderr of their own (the agent's
launcher writes to a log file), or they would write into a pipe that dies with it.
"""

from __future__ import annotations

import atexit
import os
import queue
import re
import sys
import threading
from collections.abc import Callable

__all__ = ["classify", "prepare", "restore", "watch"]

_original_stderr: int | None = None  # the real stderr while the filter runs
_MARK = "AGORA_GRPC_VERBOSITY_FOR_HANDSHAKES"

_CORE_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./-]+:\d+\] (.*)$")
_HANDSHAKE = "Handshake failed"

# What OpenSSL said -> (reason label, words for people). The first match wins.
REASONS = (
    ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "no_certificate", "the caller sent no certificate"),
    ("certificate has expired", "expired_certificate", "the certificate has expired"),
    ("not yet valid", "certificate_not_yet_valid", "the certificate is not valid yet"),
    (
        "unable to get local issuer",
        "unknown_ca",
        "the certificate is not signed by a CA this side trusts",
    ),
    ("self signed", "unknown_ca", "the certificate is self-signed and not trusted"),
    ("CERTIFICATE_VERIFY_FAILED", "bad_certificate", "the certificate did not verify"),
    ("WRONG_VERSION_NUMBER", "not_tls", "the caller does not speak TLS"),
    ("HTTP_REQUEST", "not_tls", "the caller does not speak TLS"),
)


def classify(line: str) -> tuple[str, str]:
    """(reason label, explanation) for one handshake-failure line of the core."""
    for needle, reason, words in REASONS:
        if needle in line:
            return reason, words
    return "handshake_failed", "the TLS handshake failed"


def prepare() -> bool:
    """Asks gRPC's core for its INFO lines (unless the operator chose a verbosity) and starts
    filtering stderr; call it before grpc is imported. Refusals seen before `watch` names who
    counts them are logged as they are."""
    ours = os.environ.get(_MARK) == "1"  # set by this module in a process that re-executed
    if "grpc" in sys.modules or ("GRPC_VERBOSITY" in os.environ and not ours):
        return False
    if not _start_filter():
        return False
    os.environ["GRPC_VERBOSITY"] = "INFO"
    os.environ[_MARK] = "1"
    return True


_handler: Callable[[str, str], None] | None = None


def watch(on_refusal: Callable[[str, str], None]) -> None:
    """`on_refusal(reason, words)` for each failed handshake from now on (after `prepare`)."""
    global _handler
    _handler = on_refusal


_refusals: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()


def _dispatch(reason: str, words: str) -> None:
    # Handed to another thread: the handler logs, to stderr, which is the pipe this thread is
    # the only reader of; writing it from here could block on a full pipe for ever.
    _refusals.put((reason, words))


def _report() -> None:
    while True:
        reason, words = _refusals.get()
        try:
            if _handler is not None:
                _handler(reason, words)
            else:
                _write(
                    _original_stderr or 2, f"TLS handshake refused: {words} ({reason})\n".encode()
                )
        except Exception:  # noqa: BLE001 - a failing counter must not stop the reporting
            pass


def _start_filter() -> bool:
    """Routes this process's stderr through a filter thread. False if it could not."""
    try:
        read_end, write_end = os.pipe()
        original = os.dup(2)
    except OSError:
        return False
    global _original_stderr
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    _original_stderr = original
    thread = threading.Thread(
        target=_pump, args=(read_end, original, _dispatch), name="stderr-filter", daemon=True
    )
    thread.start()
    threading.Thread(target=_report, name="handshake-reports", daemon=True).start()

    def finish() -> None:
        # At exit: put the real stderr back (closing the pipe's last write end), and let the
        # thread pass on what is still in the pipe, such as the error the process dies with.
        restore()
        thread.join(timeout=2)

    atexit.register(finish)
    return True


def restore() -> None:
    """Puts the real stderr back on fd 2 (before an exec, which the filter thread would not
    survive, leaving a pipe nobody reads)."""
    if _original_stderr is not None:
        sys.stderr.flush()
        os.dup2(_original_stderr, 2)


def _pump(read_end: int, original: int, on_refusal: Callable[[str, str], None]) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            try:
                chunk = pipe.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                if pending:
                    _write(original, pending)
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                _route(raw + b"\n", original, on_refusal)


def _route(raw: bytes, original: int, on_refusal: Callable[[str, str], None]) -> None:
    text = raw.decode("utf-8", "replace")
    match = _CORE_LINE.match(text.rstrip("\n"))
    if match is None or match.group(1) in "WEF" and "Log level INFO" not in text:
        _write(original, raw)  # ours (structlog), or a core warning or error: pass through
        return
    if _HANDSHAKE in match.group(2):
        on_refusal(*classify(match.group(2)))  # queued: reported from another thread


def _write(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except OSError:
        pass
