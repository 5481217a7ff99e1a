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

from agora.common.credentials import caller_principal
from agora.common.ownership_names import ON_BEHALF_OF, OWNER_LABEL


def acting_principal(context, master_principal: str) -> str:
    """Who acts on a framework's API: the caller, or the person the master relays a call for.
    Only the master's own certificate (`master_principal`, from SUBSCRIBED, and of the master
    kind) may speak for someone else; the master checked that person against the owner first."""
    principal = caller_principal(context)
    if principal and principal == master_principal and _is_master_certificate(context):
        for key, value in context.invocation_metadata() or ():
            if key == ON_BEHALF_OF and isinstance(value, str) and value:
                return value
    return principal


def _is_master_certificate(context) -> bool:
    """Whether the caller presented a certificate of a master (`agora tls issue --for master`):
    a bearer token, or another kind of certificate with the master's name, speaks for no one
    else."""
    auth = context.auth_context()
    pems = auth.get("x509_pem_cert") or []
    if not auth.get("x509_common_name") or not pems:
        return False
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(pems[0])
    except ValueError:
        return False
    units = cert.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATIONAL_UNIT_NAME)
    return bool(units) and units[0].value == "master"


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
