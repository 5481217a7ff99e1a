"""The one error a command raises to fail: `agora` prints it as one line and exits 1."""


class CommandError(Exception):
    """A failure to report as one line on stderr with exit code 1 (no traceback)."""


class UsageError(CommandError):
    """A bad flag or file named on the command line: one line on stderr, exit code 2."""


def unreachable(
    error: BaseException, address: str, credentials=None, *, what: str = "the master", service=""
) -> CommandError:
    """A failed call to `what` at `address` as one line naming the cause (refused, no answer,
    TLS, the wrong service, DNS, refused by the ACLs: agora.common.failures)."""
    from agora.common.credentials import INSECURE
    from agora.common.failures import classify_error

    failure = classify_error(error, address, credentials or INSECURE, what=what, service=service)
    return CommandError(failure.message)
