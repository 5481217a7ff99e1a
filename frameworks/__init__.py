"""Frameworks on Agora: the SDK (`agora.frameworks.sdk`) and the frameworks that ship with it."""

__all__: list[str] = []
