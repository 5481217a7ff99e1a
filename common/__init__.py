"""Shared value code for every component: resources, attributes, ids, logging, gRPC plumbing."""

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
