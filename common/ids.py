"""Identifiers: short, unique, and readable in logs."""

from __future__ import annotations

import uuid


def new_id(prefix: str) -> str:
    """`new_id("agent")` -> 'agent-3f9c1a2b7d4e'."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_uuid() -> bytes:
    return uuid.uuid4().bytes
