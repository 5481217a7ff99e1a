"""Shared value code for every component: resources, attributes, ids, logging, gRPC plumbing.

Each name loads its module on first use (agora.common.lazy): importing one module of the
package (a client's `agora.common.credentials`) loads neither protobuf's messages nor structlog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common.lazy import exports_on_first_use

if TYPE_CHECKING:
    from agora.common.attributes import (
        AttributeParseError,
        attributes_from_proto,
        attributes_to_proto,
        format_attributes,
        parse_attributes,
    )
    from agora.common.ids import new_id, new_uuid
    from agora.common.logs import configure_logging
    from agora.common.resources import EMPTY, UNRESERVED, ResourceError, Resources
else:
    __getattr__, __dir__ = exports_on_first_use(
        __name__,
        {
            "agora.common.attributes": (
                "AttributeParseError",
                "attributes_from_proto",
                "attributes_to_proto",
                "format_attributes",
                "parse_attributes",
            ),
            "agora.common.ids": ("new_id", "new_uuid"),
            "agora.common.logs": ("configure_logging",),
            "agora.common.resources": ("EMPTY", "UNRESERVED", "ResourceError", "Resources"),
        },
    )

__all__ = [
    "EMPTY",
    "UNRESERVED",
    "AttributeParseError",
    "ResourceError",
    "Resources",
    "attributes_from_proto",
    "attributes_to_proto",
    "configure_logging",
    "format_attributes",
    "new_id",
    "new_uuid",
    "parse_attributes",
]
