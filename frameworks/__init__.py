"""Frameworks built on Agora: the SDK (`frameworks.sdk`) and the frameworks that ship with it."""

__all__: list[str] = []
