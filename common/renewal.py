"""A joined machine renews its certificate before it expires, without a restart.

Two thirds into the certificate's life (kubelet's and Nomad's rule of thumb), the daemon makes a
new key and asks Join.Renew, on the masters' join ports where it joined (the leader answers; an
agent behind a relay reaches it there too), for a certificate with the same names, presenting
the current one over TLS. The pair is written beside the old one and moved
into place (`finish_pending` completes a move a crash interrupted), then swapped into the running
daemon (`RenewableCertificate.replace`): its server presents the new certificate at the next
handshake, and the channels it makes from then on present it too. A failure is logged and
tried again, sooner the nearer the expiry.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import structlog

from agora.common.credentials import Credentials, aio_channel

log = structlog.get_logger(__name__)

__all__ = ["finish_pending", "renew_at", "renew_forever", "renew_once"]

CERT_FILE, KEY_FILE = "cert.pem", "key.pem"
# Between tries after a failure, at most (and at least a tenth of the time left).
RETRY_MAX_SECONDS = 3600.0
RETRY_MIN_SECONDS = 5.0


def renew_at(not_before: float, not_after: float) -> float:
    """When to renew: two thirds into the certificate's life."""
    return not_before + (not_after - not_before) * 2 / 3


def retry_after(now: float, not_after: float) -> float:
    """Seconds to wait after a failed renewal: a tenth of what is left, within bounds."""
    return min(RETRY_MAX_SECONDS, max(RETRY_MIN_SECONDS, (not_after - now) / 10))


def finish_pending(tls_dir: Path) -> None:
    """Completes a renewal that a crash cut short, or drops what it left half done.

    A renewal writes cert.pem.new, then key.pem.new (the commit mark: each written whole,
    common.certificates.write_whole), then moves the certificate into place, then the key.
    So a key.pem.new is installed if it is the key of the new certificate (still pending, or
    already moved); anything else pending is an unfinished renewal and is removed."""
    from agora.common.certificates import is_pair

    key_new, cert_new = tls_dir / f"{KEY_FILE}.new", tls_dir / f"{CERT_FILE}.new"
    if not key_new.exists():
        cert_new.unlink(missing_ok=True)
        return
    cert_source = cert_new if cert_new.exists() else tls_dir / CERT_FILE
    try:
        paired = is_pair(cert_source.read_bytes(), key_new.read_bytes())
    except OSError:
        paired = False
    if not paired:
        cert_new.unlink(missing_ok=True)
        key_new.unlink(missing_ok=True)
        return
    if cert_new.exists():
        os.replace(cert_new, tls_dir / CERT_FILE)
    os.replace(key_new, tls_dir / KEY_FILE)


def _validity(cert_pem: bytes) -> tuple[float, float]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()


async def renew_once(credentials: Credentials, address: str, timeout: float = 30.0) -> float:
    """One renewal through the master at `address`; returns the new certificate's expiry."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from agora.common import certificates
    from agora.v1 import join_pb2, join_pb2_grpc

    renewable = credentials.renewable
    assert renewable is not None and credentials.ca is not None
    key = certificates.new_key()
    old = x509.load_pem_x509_certificate(renewable.cert)
    name = str(old.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)
    csr = certificates.signing_request(key, name)
    # Signed with the current key: the join port asks for no client certificate.
    current = serialization.load_pem_private_key(renewable.key, password=None)
    assert isinstance(current, ec.EllipticCurvePrivateKey)
    request = join_pb2.RenewRequest(
        csr=csr,
        certificate=renewable.cert,
        signature=current.sign(csr, ec.ECDSA(hashes.SHA256())),
    )
    async with aio_channel(address, credentials) as channel:
        reply = await join_pb2_grpc.JoinStub(channel).Renew(request, timeout=timeout)
    cert = x509.load_pem_x509_certificate(reply.certificate)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(credentials.ca))
    if not certificates.same_key(cert, key):
        raise ValueError("the renewed certificate is not for the new key")
    if reply.principal != name:
        raise ValueError(f"the renewed certificate names {reply.principal!r}, not {name!r}")
    key_pem = certificates.key_pem(key)
    tls_dir = renewable.tls_dir
    certificates.write_whole(tls_dir / f"{CERT_FILE}.new", reply.certificate)
    certificates.write_whole(tls_dir / f"{KEY_FILE}.new", key_pem, private=True)
    finish_pending(tls_dir)
    renewable.replace(reply.certificate, key_pem)
    return cert.not_valid_after_utc.timestamp()


async def _renew_through(credentials: Credentials, addresses: list[str]) -> float:
    """renew_once through the first of `addresses` that answers."""
    if not addresses:
        raise ValueError("no join address to renew through")
    for address in addresses[:-1]:
        try:
            return await renew_once(credentials, address)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
    return await renew_once(credentials, addresses[-1])


async def renew_forever(
    credentials: Credentials,
    clock: Callable[[], float] = time.time,
) -> None:
    """Renews the certificate each time it is two thirds through its life, for ever, through
    the masters' join ports (where it joined: reachable from an agent behind a relay too)."""
    renewable = credentials.renewable
    assert renewable is not None
    renewed_at: float | None = None
    while True:
        not_before, not_after = _validity(renewable.cert)
        wait = renew_at(not_before, not_after) - clock()
        if renewed_at is not None:
            # A master that signs for a few seconds only is still not asked in a tight loop.
            wait = max(wait, renewed_at + RETRY_MIN_SECONDS - clock())
        if wait > 0:
            await asyncio.sleep(min(wait, RETRY_MAX_SECONDS))  # then look again
            continue
        where = ",".join(renewable.addresses)
        try:
            expires = await _renew_through(credentials, renewable.addresses)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever failed, the loop must go on
            not_after = _validity(renewable.cert)[1]
            delay = retry_after(clock(), not_after)
            details = e.details() if isinstance(e, grpc.aio.AioRpcError) else repr(e)
            expired = not_after <= clock()
            log.warning(
                "cannot renew the certificate; it has expired: join again with a new token"
                if expired
                else "cannot renew the certificate; trying again",
                master=where,
                error=details,
                expires_in=f"{not_after - clock():.0f}s",
                retry_in=f"{delay:.0f}s",
            )
            await asyncio.sleep(delay)
            continue
        renewed_at = clock()
        log.info(
            "certificate renewed",
            valid_until=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires)),
        )
