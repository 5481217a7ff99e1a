"""Environment values (which may hold secrets) hidden from those who may not see them.

One walk serves every message that carries environments: an agent's TaskInfo, a batch Job or
JobEvent, a service AppStatus. Every string map named `env` or `environment`, at any depth, keeps
its names (they say what is set) and loses its values.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TypeVar

__all__ = ["HIDDEN", "hide_values", "without_environments"]

HIDDEN = "(hidden)"
_NAMES = ("env", "environment")

M = TypeVar("M")


def hide_values(env: MutableMapping[str, str]) -> None:
    for name in list(env):
        env[name] = HIDDEN


def _hide(message) -> None:
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.name in _NAMES:
                hide_values(value)
            continue
        for item in value if field.is_repeated else (value,):
            _hide(item)


def without_environments(message: M) -> M:
    """A copy of `message` with every environment's values hidden."""
    copy = type(message)()
    copy.CopyFrom(message)  # type: ignore[attr-defined]
    _hide(copy)
    return copy
