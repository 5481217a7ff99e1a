"""The joining machine's side: a key made here, a certificate from the master, kept on disk.

`agora agent --join FILE` (and `agora batch`, `agora services`) call `ensure_joined` before they
start: with certificate files already in the TLS directory (a restart), those are used and the
token is not needed again; otherwise this machine makes its key, proves it holds the token,
and writes what the master signed. See agora/common/join_tokens.py for the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from agora.common import join_tokens

__all__ = ["JoinError", "Joined", "ensure_joined", "join_address"]

CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "cert.pem", "key.pem"
JOIN_PORT = 5052


class JoinError(Exception):
    """Joining failed; the message says why and what to do."""


@dataclass(frozen=True)
class Joined:
    ca: Path
    cert: Path
    key: Path
    principal: str
    fresh: bool  # False: the files were there from an earlier join


def join_address(master: str, given: str | None) -> list[str]:
    """Where to join: `given` (--join-address), else each master's host on port 5052 (only
    the leader serves joins: they are tried in turn)."""
    if given:
        return [given]
    if master.startswith("zk://"):
        raise JoinError("with a zk:// master, give --join-address HOST:PORT of the leader")
    out = []
    for each in master.split(","):
        each = each.strip()
        host = each.rsplit(":", 1)[0] if each.count(":") == 1 or each.startswith("[") else each
        out.append(f"{host}:{JOIN_PORT}")
    return out


def ensure_joined(
    tls_dir: Path, token_file: Path, addresses: list[str], timeout: float = 30.0
) -> Joined:
    """The certificate files in `tls_dir`, joining through the first of `addresses` that
    answers if there are none, or if those there have expired and a token is at hand. The
    token file is removed once it is spent (it is of no more use, to anyone)."""
    paths = Joined(tls_dir / CA_FILE, tls_dir / CERT_FILE, tls_dir / KEY_FILE, "", False)
    if tls_dir.is_dir():
        from agora.common.renewal import finish_pending

        finish_pending(tls_dir)  # a renewal the last run did not finish moving into place
    if all(p.exists() for p in (paths.ca, paths.cert, paths.key)):
        from agora.common.certificates import principal_of

        cert_pem = paths.cert.read_bytes()
        if not (_expired(cert_pem) and token_file.exists()):
            return Joined(paths.ca, paths.cert, paths.key, principal_of(cert_pem), False)
        for path in (paths.ca, paths.cert, paths.key):  # expired: kept aside, joined again
            path.replace(path.with_name(path.name + ".expired"))
    try:
        text = token_file.read_text()
    except OSError as e:
        raise JoinError(f"--join {token_file}: {e.strerror or e}") from None
    try:
        token = join_tokens.parse(text)
    except join_tokens.JoinTokenError as e:
        raise JoinError(f"--join {token_file}: {e}") from None
    for address in addresses[:-1]:
        try:
            joined = _join(token, tls_dir, address, timeout)
            break
        except _Unreachable:
            continue  # not the leader, or down: the next
    else:
        try:
            joined = _join(token, tls_dir, addresses[-1], timeout)
        except _Unreachable as e:
            raise JoinError(str(e)) from None
    try:
        token_file.unlink()
    except OSError:
        pass  # read-only: it is spent anyway
    return joined


class _Unreachable(JoinError):
    """No join service answered there."""


def _expired(cert_pem: bytes) -> bool:
    import time

    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc.timestamp() <= time.time()


def _join(token: join_tokens.JoinToken, tls_dir: Path, address: str, timeout: float) -> Joined:
    from cryptography import x509

    from agora.common import certificates
    from agora.v1 import join_pb2, join_pb2_grpc

    key = certificates.new_key()
    csr = certificates.signing_request(key, token.name)
    request = join_pb2.JoinRequest(
        token_payload=token.payload, csr=csr, proof=join_tokens.proof(token.secret, csr)
    )
    # Trusting only the CA the token carries: a master without a certificate of it fails here.
    channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(token.ca_pem))
    try:
        reply = join_pb2_grpc.JoinStub(channel).Join(request, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code()  # type: ignore[attr-defined]
        details = e.details()  # type: ignore[attr-defined]
        if code == grpc.StatusCode.UNAVAILABLE:
            raise _Unreachable(
                f"cannot join through {address}: {details} (is the master started with "
                "--join-ca, and is its join port reachable? --join-address names it)"
            ) from None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise JoinError(
                f"no answer from {address} within {timeout:g} s; if the master got the "
                "request the token is spent: make a new one if the next try says so"
            ) from None
        raise JoinError(f"the master refused to join this machine: {details}") from None
    finally:
        channel.close()
    cert = x509.load_pem_x509_certificate(reply.certificate)
    ca = x509.load_pem_x509_certificate(token.ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except Exception as e:  # noqa: BLE001 - any failure: not signed by the token's CA
        raise JoinError(f"the certificate the master sent is not of the token's CA ({e})") from None
    if not certificates.same_key(cert, key):
        raise JoinError("the certificate the master sent is not for this machine's key")
    tls_dir.mkdir(parents=True, exist_ok=True)
    certificates.write_whole(tls_dir / CA_FILE, token.ca_pem)
    certificates.write_whole(tls_dir / CERT_FILE, reply.certificate)
    # Last, and whole: with key.pem there, the join is complete.
    certificates.write_whole(tls_dir / KEY_FILE, certificates.key_pem(key), private=True)
    return Joined(tls_dir / CA_FILE, tls_dir / CERT_FILE, tls_dir / KEY_FILE, reply.principal, True)
