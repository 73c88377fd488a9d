"""A2A's specification as a check: what the service sends must be what the
specification defines, as the SDK derives its schema from the protocol's
own descriptors (``a2a.server.routes._proto_schema``; the specification
publishes no JSON Schema file of its own).

``check_against_spec(wire, Task)`` takes a JSON value as it went over the
wire and checks it three ways: every member is one of the message's fields
under its JSON name (a strict parse: no member the specification does not
name); every field the specification marks REQUIRED is there; and the
message, as JSON, fits the derived JSON Schema (types, enumerations, and
exactly one kind of content per part).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from a2a.server.routes._proto_schema import message_schema
from a2a.types import AgentCard
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

# Members an Agent Card also carries for clients of A2A 0.3 (the SDK's
# agent_card_to_dict adds them, and 0.3's members of each security scheme
# beside 1.0's one member naming its kind); the check is of the 1.0 card.
CARD_COMPAT_MEMBERS = frozenset(
    {"url", "preferredTransport", "protocolVersion", "additionalInterfaces", "supportsAuthenticatedExtendedCard"}
    | {"security"}
)


def check_against_spec(wire: Mapping[str, Any], message: type[Message]) -> Message:
    """The ``message`` ``wire`` holds, once it is known to fit the specification."""
    given = dict(wire)
    if message is AgentCard:
        given = {key: value for key, value in given.items() if key not in CARD_COMPAT_MEMBERS}
        schemes = given.get("securitySchemes") or {}
        given["securitySchemes"] = {
            name: {kind: value for kind, value in scheme.items() if kind.endswith("SecurityScheme")}
            for name, scheme in schemes.items()
        }
    parsed = ParseDict(given, message())  # strict: a member the specification does not name fails
    validate_proto_required_fields(parsed)
    components: dict[str, Any] = {}
    document = {**message_schema(message.DESCRIPTOR, components), "components": {"schemas": components}}
    jsonschema.Draft202012Validator(document).validate(MessageToDict(parsed, preserving_proto_field_name=True))
    return parsed
