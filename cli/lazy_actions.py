"""Actions of a command built in full only when chosen: `agora job submit` builds the parser of
`submit` alone, not those of its 17 siblings (an ArgumentParser costs about 0.2 ms, mostly
gettext lookups: 4 ms of the command's start-up). The others are registered by name and summary
only (argparse's own pseudo-action for a choice, with no parser behind it), which is all
`agora job --help` and an "invalid choice" error show."""

from __future__ import annotations

import argparse


def chosen_action(argv: list[str] | None, command: str) -> str | None:
    """The word after `command` in argv that is not an option (the action), if any."""
    if argv is None:
        return None
    words = iter(argv)
    for word in words:
        if word == command:
            break
    else:
        return None
    return next((w for w in words if not w.startswith("-")), None)


class _Unbuilt:
    """Stands for the parser of an action that was not chosen: whatever is added to it is
    dropped (its arguments are never parsed)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self


class LazyActions:
    """Wraps a subparsers action: add_parser builds the chosen action in full (every action
    when none could be told, as when a test builds the parser without argv)."""

    def __init__(self, actions: argparse._SubParsersAction, chosen: str | None, known: bool):
        self._actions, self._chosen, self._known = actions, chosen, known

    def builds(self, name: str) -> bool:
        """Whether action `name` is to be built in full (else its name and summary do)."""
        return not self._known or name == self._chosen

    def add_parser(self, name: str, **kwargs):
        if self.builds(name):
            return self._actions.add_parser(name, **kwargs)
        actions = self._actions
        pseudo = getattr(type(actions), "_ChoicesPseudoAction", None)
        if pseudo is None:  # argparse changed: build a bare parser for the name instead
            actions.add_parser(name, help=kwargs.get("help"))
            return _Unbuilt()
        # Only the name and its summary, without an ArgumentParser behind it (one costs about
        # 0.2 ms): what `--help` lists and an invalid choice names. Never parsed: argv chose
        # another action.
        actions._name_parser_map[name] = _Unbuilt()
        actions._choices_actions.append(pseudo(name, (), kwargs.get("help")))
        return _Unbuilt()
