"""Agent attributes: `rack:r1;zone:z1` on the command line, name -> text everywhere else."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from agora.v1 import common_pb2

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class AttributeParseError(ValueError):
    """A malformed attribute string."""


def parse_attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _NAME.fullmatch(name) or not value:
            raise AttributeParseError(
                f"cannot parse attribute {part!r}: write name:value, e.g. rack:r1"
            )
        out[name] = value
    return out


def attributes_to_proto(attributes: Mapping[str, str]) -> list[common_pb2.Attribute]:
    return [common_pb2.Attribute(name=k, text=v) for k, v in sorted(attributes.items())]


def attributes_from_proto(attributes: Iterable[common_pb2.Attribute]) -> dict[str, str]:
    return {a.name: a.text for a in attributes}


def format_attributes(attributes: Mapping[str, str]) -> str:
    return ";".join(f"{k}:{v}" for k, v in sorted(attributes.items()))
