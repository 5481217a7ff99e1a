"""Who owns a job or an app in a framework's own API, and what others may see of it.

The batch and service frameworks record the caller's principal (its certificate's name or its
bearer token's, see agora.common.credentials) in the label `agora.owner` when a job is submitted
or an app created; a caller cannot set that label itself. Only the owner may then kill the job,
or update, scale or delete the app, and only the owner sees the values of its environment (which
may hold secrets); others see the names. Without TLS every caller is anonymous (""), and an
anonymous owner's things are everyone's, as before TLS. Operators act on any framework's tasks
through the master (`agora cluster kill`, `agora cluster teardown`), as its ACLs allow.
"""

from __future__ import annotations

from collections.abc import MutableMapping

OWNER_LABEL = "agora.owner"


def stamp_owner(labels: MutableMapping[str, str], principal: str, keep: str | None = None) -> None:
    """Sets the owner label to `keep` (an existing owner) or `principal`; an anonymous owner
    leaves no label (a caller's own `agora.owner` is dropped either way)."""
    owner = keep if keep is not None else principal
    labels.pop(OWNER_LABEL, None)
    if owner:
        labels[OWNER_LABEL] = owner


def owner_of(labels) -> str:
    return labels.get(OWNER_LABEL, "")


def may_act(principal: str, labels) -> bool:
    owner = owner_of(labels)
    return not owner or principal == owner


def refusal(principal: str, action: str, what: str, labels) -> str:
    who = principal or "an anonymous caller"
    return f"{who} may not {action} {what}, which {owner_of(labels)} owns"
