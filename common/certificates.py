"""Issuing Agora's certificates: a certificate authority, and certificates for daemons and people.

`agora tls init` and `agora tls issue` call this; nothing here opens a connection. The
certificate's common name is its holder's principal (what ACLs name). Keys are ECDSA P-256: small,
and the cheapest handshake gRPC's TLS offers. Written with `cryptography` (the library every
Python TLS tool builds on) rather than by shelling out to openssl.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "CertificateAuthority",
    "check_names",
    "KINDS",
    "CertificateError",
    "Issued",
    "init_ca",
    "issue",
    "key_pem",
    "names_to_renew",
    "new_key",
    "principal_of",
    "same_key",
    "signing_request",
    "unnamed_address",
    "is_pair",
    "write_private",
    "write_whole",
]

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"

# Who a certificate is for -> the key usages it needs. Masters, agents and frameworks serve gRPC
# (the Agent, Batch and Services APIs) and also dial out, so they are servers and clients; a
# person's certificate is only ever a client's.
KINDS = {
    "master": (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    "agent": (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    "relay": (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    "framework": (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
    "client": (ExtendedKeyUsageOID.CLIENT_AUTH,),
}

# Marks a certificate the master signed for a machine that joined with a token (an OID of
# our own, under the UUID arc 2.25): only such certificates may be renewed, so that a person's
# certificate, or any made by `agora tls issue`, expires when it says.
JOINED = x509.ObjectIdentifier("2.25.222427390154717520343651385936158283394")
# Kinds of certificate a machine may join as, and renew.
JOINED_KINDS = ("agent", "framework")

# Server certificates also name the loopback host, so a daemon and its clients on one machine
# (`agora local`, tests) verify without --host; Nomad's `tls cert create` does the same.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


class CertificateError(Exception):
    """A bad request or unreadable CA; the message says what to change."""


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    # Created 0600 from the start: the key is never readable by others, not even for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _refuse_existing(*paths: Path) -> None:
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise CertificateError(f"{', '.join(existing)} already exist(s); use --force to replace")


def init_ca(
    directory: Path, name: str = "Agora CA", days: int = 3650, force: bool = False
) -> Issued:
    """A new certificate authority in `directory`: ca.pem (share it) and ca-key.pem (keep it)."""
    if days < 1:
        raise CertificateError(f"--days must be at least 1, got {days}")
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not force:
        _refuse_existing(cert_path, key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(cert=cert_path, key=key_path)


def _load_ca(ca_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = ca_dir / CA_CERT, ca_dir / CA_KEY
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except FileNotFoundError as e:
        raise CertificateError(
            f"{e.filename}: not found; create a CA first with `agora tls init {ca_dir}`"
        ) from None
    except ValueError as e:
        raise CertificateError(f"{ca_dir}: not a CA made by `agora tls init` ({e})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{key_path}: expected an ECDSA key made by `agora tls init`")
    return cert, key


def _subject_names(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):  # in order, once each
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not host or any(c in host for c in " /:@"):
                raise CertificateError(
                    f"--host {host!r}: give a DNS name or an IP address"
                ) from None
            names.append(x509.DNSName(host))
    return names


def issue(
    ca_dir: Path,
    name: str,
    kind: str,
    hosts: list[str] | None = None,
    out_dir: Path | None = None,
    days: int = 825,
    force: bool = False,
) -> Issued:
    """A certificate and key for principal `name`, signed by the CA in `ca_dir`.

    Written to `out_dir` (default: the CA's directory) as NAME.pem and NAME-key.pem.
    """
    if kind not in KINDS:
        raise CertificateError(f"--for {kind!r}: use one of {', '.join(KINDS)}")
    _check_name(name)
    if days < 1:
        raise CertificateError(f"--days must be at least 1, got {days}")
    ca_cert, ca_key = _load_ca(ca_dir)
    out = out_dir or ca_dir
    out.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out / f"{name}.pem", out / f"{name}-key.pem"
    if not force:
        _refuse_existing(cert_path, key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _signed(ca_cert, ca_key, key.public_key(), name, kind, hosts or [], days)
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issued(cert=cert_path, key=key_path)


def _skew(days: float) -> datetime.timedelta:
    """How far back a certificate's validity starts, for clocks a little behind: 5 minutes, or
    a tenth of a short life (renewal at two thirds of it must still lie ahead)."""
    return min(datetime.timedelta(minutes=5), datetime.timedelta(days=days) / 10)


def check_names(name: str, hosts: list[str]) -> None:
    """CertificateError if a certificate could not name `name` and `hosts`."""
    _check_name(name)
    _subject_names(hosts)


def _check_name(name: str) -> None:
    if not name or len(name) > 64 or any(c in name for c in "/\\\0\n") or name.startswith("."):
        raise CertificateError(
            f"--name {name[:80]!r}: use 1-64 characters, no slashes, not starting with '.'"
        )


def _signed(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    public_key,
    name: str,
    kind: str,
    hosts: list[str],
    days: float,
    joined: bool = False,
) -> x509.Certificate:
    """A certificate for principal `name` of `kind` over `public_key`, signed by the CA
    (`joined`: marked as a joined machine's, which it may renew)."""
    all_hosts = list(hosts)
    if ExtendedKeyUsageOID.SERVER_AUTH in KINDS[kind]:
        all_hosts += LOOPBACK_HOSTS
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                    # The kind is informative (ACLs decide what a principal may do).
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, kind),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _skew(days))
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(KINDS[kind])), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if all_hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_subject_names(all_hosts)), critical=False
        )
    if joined:
        builder = builder.add_extension(
            x509.UnrecognizedExtension(JOINED, b"\x05\x00"),
            critical=False,  # DER NULL
        )
    return builder.sign(ca_key, hashes.SHA256())


class CertificateAuthority:
    """A CA loaded once (the master's, for joins): signs certificate requests."""

    def __init__(self, ca_dir: Path) -> None:
        self.cert, self.key = _load_ca(ca_dir)
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        if not same_key(self.cert, self.key):
            raise CertificateError(f"{ca_dir / CA_KEY} is not the key of {ca_dir / CA_CERT}")

    def check_held(self, cert_pem: bytes, signature: bytes, signed: bytes) -> str | None:
        """Why `cert_pem` does not prove its holder (None when it does): it must be this CA's,
        in date, and `signature` its key's ECDSA-SHA256 signature of `signed`."""
        from cryptography.exceptions import InvalidSignature

        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
            cert.verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, InvalidSignature):
            return "the certificate is not one of this cluster's CA"
        now = _now()
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            return "the certificate has expired (or is not valid yet): join again with a new token"
        public = cert.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            return "the certificate's key is not ECDSA"
        try:
            public.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return "the signature is not that certificate's key's"
        return None

    @property
    def token_key(self) -> bytes:
        """The key join tokens are made and checked with (common/join_tokens.py)."""
        from agora.common.join_tokens import derived_key

        return derived_key(self.key.private_numbers().private_value)

    def sign_request(
        self, csr_der: bytes, name: str, kind: str, hosts: list[str], days: float
    ) -> bytes:
        """The PEM certificate for a signing request's key, naming `name` and `hosts` as the
        caller decided (whatever the request itself asks for), marked as a joined machine's."""
        if kind not in JOINED_KINDS:
            raise CertificateError(f"kind {kind!r}: use one of {', '.join(JOINED_KINDS)}")
        _check_name(name)
        try:
            request = x509.load_der_x509_csr(csr_der)
        except ValueError as e:
            raise CertificateError(f"not a certificate signing request ({e})") from None
        if not request.is_signature_valid:
            raise CertificateError("the signing request's signature does not verify")
        public_key = request.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey):
            raise CertificateError("the signing request's key must be ECDSA (P-256)")
        cert = _signed(self.cert, self.key, public_key, name, kind, hosts, days, joined=True)
        return cert.public_bytes(serialization.Encoding.PEM)


def names_to_renew(cert_pem: bytes) -> tuple[str, str, list[str]]:
    """The principal, kind and hosts (less loopback, which is added anyway) of a joined
    machine's certificate, for its renewal; CertificateError for any other certificate (a
    person's, or one `agora tls issue` made, expires when it says)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    kinds = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    kind = str(kinds[0].value) if kinds else ""
    try:
        cert.extensions.get_extension_for_oid(JOINED)
    except x509.ExtensionNotFound:
        raise CertificateError(
            "only a machine that joined with a token renews its certificate this way; this "
            "one was issued otherwise: issue a new one with `agora tls issue`"
        ) from None
    if not names or kind not in JOINED_KINDS:
        raise CertificateError("the certificate names no principal and kind that may renew")
    try:
        alternative = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        hosts: list[str] = []
    else:
        hosts = [str(ip) for ip in alternative.get_values_for_type(x509.IPAddress)]
        hosts += alternative.get_values_for_type(x509.DNSName)
    return str(names[0].value), kind, [h for h in hosts if h not in LOOPBACK_HOSTS]


def signing_request(key: ec.EllipticCurvePrivateKey, name: str) -> bytes:
    """A DER certificate signing request for `key` (the CA decides the names it gets)."""
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.DER)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return _key_pem(key)


def write_private(path: Path, data: bytes) -> None:
    """Writes a secret file, mode 0600 from the start."""
    _write_private(path, data)


def write_whole(path: Path, data: bytes, private: bool = False) -> None:
    """Writes `path` so that it is never seen half written: a temporary file beside it,
    flushed to disk, then renamed over it (mode 0600 from the start when `private`)."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def is_pair(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether the key is the certificate's (False for anything unreadable)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return same_key(cert, key)


def same_key(cert: x509.Certificate, key) -> bool:
    """Whether `key` (a private key) is the one `cert` certifies."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


def principal_of(cert_pem: bytes) -> str:
    """The principal a certificate names: its common name."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise CertificateError("the certificate has no common name")
    value = names[0].value
    return value if isinstance(value, str) else value.decode()


def unnamed_address(cert_pem: bytes, address: str, command: str) -> str | None:
    """Why clients will refuse the daemon `command` (`agora agent`) reached at `address`
    ("host:port", what it gives out): its certificate does not name that host, so every
    client's TLS hostname check fails. None when it names it (or the host is a wildcard)."""
    host = address.rpartition(":")[0].strip("[]") or address
    if host in ("0.0.0.0", "::", ""):
        return None
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return f"the certificate of `{command}` names no address, so clients will refuse it"
    ips = [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    dns = names.get_values_for_type(x509.DNSName)
    try:
        if ipaddress.ip_address(host) in map(ipaddress.ip_address, ips):
            return None
    except ValueError:
        if host.lower() in (name.lower() for name in dns):
            return None
    return (
        f"the certificate of `{command}` (--tls-cert) names {', '.join([*dns, *ips])}, not "
        f"{host}, where clients reach it: they will refuse it (task logs, sandboxes, API "
        f"calls). Issue it with `agora tls issue ... --host {host}`, or give --host/"
        "--advertise-ip an address it names"
    )
