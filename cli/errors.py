"""The one error a command raises to fail: `agora` prints it as one line and exits 1."""


class CommandError(Exception):
    """A failure to report as one line on stderr with exit code 1 (no traceback)."""


class UsageError(CommandError):
    """A bad flag or file named on the command line: one line on stderr, exit code 2."""
