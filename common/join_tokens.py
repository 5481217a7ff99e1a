"""Join tokens: one file that lets a new machine get its own certificate from the master.

`agora tls join-token` (on the machine holding the CA) writes a token for one principal and kind
(`agent-7`, an agent), valid for a short while and once. The new machine's daemon (`agora agent
--join FILE`) makes its key locally, and sends the master's join port a signing request with a
proof: an HMAC of the request under the token's secret. The secret itself never crosses the
network, so a request seen on the wire cannot be replayed for another key, and the token is
spent on first use (the master's registry says so, across failovers). This is how k3s, Nomad's
and Consul's auto-encrypt join a node, with the key never leaving it.

The token carries the CA's certificate: the daemon dials the join port over TLS trusting that CA
only (a fingerprint alone would need the certificate fetched unverified first, which neither
gRPC nor Python 3.11's ssl module can do). The master recomputes the secret from the token's
public part and a key derived from the CA's private key (its scalar, however the key file is
encoded), so any master holding the CA checks any token without a shared list.

    token file:  agora-join-v1.<payload>.<secret>      (base64url, one line)
    payload:     {"id", "name", "kind", "hosts", "expires", "ca"}   (JSON)
    secret:      HMAC-SHA256(derived CA key, payload)
    proof:       HMAC-SHA256(secret, the CSR's DER)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

__all__ = ["PREFIX", "JoinToken", "JoinTokenError", "parse", "proof", "secret_for"]

PREFIX = "agora-join-v1"
# Relays do not join (yet): `agora relay` takes certificates from `agora tls issue`.
KINDS = ("agent", "framework")


class JoinTokenError(ValueError):
    """A token that cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class JoinToken:
    token_id: str
    name: str  # the principal the certificate will name
    kind: str  # agent, framework or relay
    hosts: tuple[str, ...]  # extra names for the certificate (the joiner's address is added)
    expires: float  # Unix seconds
    ca_pem: bytes  # the cluster CA's certificate
    payload: bytes  # the signed JSON, as written
    secret: bytes = b""  # empty on the master's side (it recomputes it)

    def encode(self) -> str:
        return ".".join([PREFIX, _b64(self.payload), _b64(self.secret)])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derived_key(ca_private_value: int) -> bytes:
    """The HMAC key for tokens, from the CA's private key (its scalar): whoever can sign
    certificates can make tokens, and nobody else."""
    raw = ca_private_value.to_bytes((ca_private_value.bit_length() + 7) // 8, "big")
    return hmac.new(raw, b"agora join tokens v1", hashlib.sha256).digest()


def secret_for(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, hashlib.sha256).digest()


def proof(secret: bytes, csr_der: bytes) -> bytes:
    """What the joiner sends instead of the secret: bound to its own signing request."""
    return hmac.new(secret, csr_der, hashlib.sha256).digest()


def make(
    key: bytes,
    ca_pem: bytes,
    name: str,
    kind: str,
    ttl_seconds: float,
    hosts: list[str] | None = None,
    now: float | None = None,
) -> JoinToken:
    if kind not in KINDS:
        raise JoinTokenError(f"--for {kind!r}: a join token is for one of {', '.join(KINDS)}")
    if ttl_seconds <= 0:
        raise JoinTokenError(f"--ttl must be more than 0 seconds, got {ttl_seconds:g}")
    expires = (time.time() if now is None else now) + ttl_seconds
    body = {
        "id": secrets.token_hex(16),
        "name": name,
        "kind": kind,
        "hosts": list(hosts or []),
        "expires": round(expires, 3),
        "ca": ca_pem.decode(),
    }
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return _token(payload, secret_for(key, payload))


def _token(payload: bytes, secret: bytes) -> JoinToken:
    try:
        body = json.loads(payload)
        return JoinToken(
            token_id=str(body["id"]),
            name=str(body["name"]),
            kind=str(body["kind"]),
            hosts=tuple(str(h) for h in body["hosts"]),
            expires=float(body["expires"]),
            ca_pem=str(body["ca"]).encode(),
            payload=payload,
            secret=secret,
        )
    except (ValueError, KeyError, TypeError) as e:
        raise JoinTokenError(f"not a join token made by `agora tls join-token` ({e})") from None


def parse(text: str) -> JoinToken:
    """A token as `encode` wrote it (the joiner's side)."""
    parts = text.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise JoinTokenError("not a join token made by `agora tls join-token`")
    try:
        payload, secret = _unb64(parts[1]), _unb64(parts[2])
    except ValueError:
        raise JoinTokenError("not a join token made by `agora tls join-token`") from None
    return _token(payload, secret)


def check(
    key: bytes, payload: bytes, csr_der: bytes, given_proof: bytes, now: float | None = None
) -> JoinToken:
    """The master's side: the token whose `payload` this is, if `given_proof` proves that
    the caller holds its secret for this very request and it has not expired. Whether it was
    used before is the registry's to say. The proof is checked before the payload is read:
    nothing a stranger sends is parsed."""
    expected = proof(secret_for(key, payload), csr_der)
    if not hmac.compare_digest(expected, given_proof):
        raise JoinTokenError("the join token is not one of this cluster's CA, or was altered")
    token = _token(payload, b"")
    if (time.time() if now is None else now) > token.expires:
        raise JoinTokenError(
            "the join token has expired: make a new one with `agora tls join-token`"
        )
    return token
