"""Argument types shared by the `agora` command and the experiments' own parsers."""

from __future__ import annotations

import argparse

__all__ = ["whole_number"]


def whole_number(minimum: int = 0):
    """An argparse type for a whole number of at least `minimum` (a count of things)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    return parse
