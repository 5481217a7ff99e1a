"""Credentials for every gRPC connection: the one place servers and channels are made secure.

Every daemon and client builds its server port (`add_port`) and its channels (`aio_channel`,
`sync_channel`) here, from a `Credentials` value: mutual TLS from a CA, a certificate and a key
(`agora tls` makes them), or none (plaintext, for loopback or an explicit --insecure). With TLS,
each side proves itself with a certificate of the cluster's CA, and a caller's principal is its
certificate's common name (`caller_principal`), which ACLs name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from agora.common.tokens import (
    BearerInterceptor,
    SyncBearerInterceptor,
    TokenBook,
    TokenError,
    read_token_file,
    token_principal,
)

if TYPE_CHECKING:  # at run time cryptography (~20 ms) is loaded only to read TLS files
    from cryptography import x509

__all__ = [
    "INSECURE",
    "Credentials",
    "CredentialsError",
    "RenewableCertificate",
    "add_port",
    "aio_channel",
    "caller_principal",
    "check_listen",
    "handshake_refusal",
    "is_loopback",
    "not_served_by",
    "peer_certificate_principal",
    "server_principal",
    "server_ssl_context",
    "sync_channel",
]


class CredentialsError(ValueError):
    """Unusable credential files; the message names the file and what is wrong."""


class RenewableCertificate:
    """This side's certificate and key where they are renewed while the daemon runs
    (common/renewal.py): servers take the new ones at their next handshake and new channels
    present them; `version` counts the renewals."""

    def __init__(
        self,
        cert: bytes,
        key: bytes,
        tls_dir: Path,
        addresses: list[str] | None = None,
        files: tuple[Path, Path] | None = None,
    ) -> None:
        self.cert, self.key, self.tls_dir = cert, key, tls_dir
        # The masters' join ports, where it renews (tried in turn: only the leader answers);
        # none for a certificate given as files, which the operator replaces (on SIGHUP).
        self.addresses = list(addresses or [])
        self.files = files  # --tls-cert and --tls-key, re-read by `reload_certificate`
        self.version = 0
        # Called with (cert, key) on each renewal: HTTPS contexts reload the pair.
        self.listeners: list[Callable[[bytes, bytes], None]] = []

    def current_pair(self) -> tuple[bytes, bytes]:
        return self.cert, self.key

    def replace(self, cert: bytes, key: bytes) -> None:
        self.cert, self.key = cert, key
        self.version += 1
        for listener in self.listeners:
            listener(cert, key)


@dataclass(frozen=True)
class Credentials:
    """PEM bytes of the CA, this side's certificate and its key; all None: plaintext."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    principal: str = ""  # this side's own name (its certificate's common name)
    # A bearer token this side presents on its calls (common.tokens), read from --token-file.
    token: str | None = None
    # Tokens this side's servers accept (--tokens): they then take a token on every call and,
    # over TLS, ask for no client certificate.
    tokens: TokenBook | None = None
    # Set when the certificate is renewed in place (a joined machine's): then it, not `cert`
    # and `key`, holds the current pair.
    renewable: RenewableCertificate | None = None

    def current(self) -> tuple[bytes | None, bytes | None]:
        """This side's certificate and key as they are now (renewed ones included)."""
        if self.renewable is not None:
            return self.renewable.cert, self.renewable.key
        return self.cert, self.key

    @property
    def version(self) -> int:
        """How many times the certificate was renewed (a channel made before is out of date)."""
        return self.renewable.version if self.renewable is not None else 0

    @property
    def secure(self) -> bool:
        return self.ca is not None

    @classmethod
    def load(
        cls,
        ca: str | Path | None,
        cert: str | Path | None,
        key: str | Path | None,
        token_file: str | Path | None = None,
        tokens_file: str | Path | None = None,
    ) -> Credentials:
        """Reads and checks the files: the three TLS files (all or none; only the CA with a
        token), a token file, a tokens file. TLS files must be readable, PEM, in date, and match."""
        try:
            token = read_token_file(token_file) if token_file else None
            tokens = TokenBook.load(tokens_file) if tokens_file else None
        except TokenError as e:
            raise CredentialsError(str(e)) from None
        given = {"--tls-ca": ca, "--tls-cert": cert, "--tls-key": key}
        if not any(given.values()):
            return cls(token=token, tokens=tokens) if token or tokens else INSECURE
        if token and ca and not cert and not key:  # one-way TLS: the token says who
            try:
                ca_data = Path(str(ca)).read_bytes()
            except OSError as e:
                raise CredentialsError(f"--tls-ca {ca}: {e.strerror or e}") from None
            _certificate(ca_data, f"--tls-ca {ca}")
            return cls(ca=ca_data, token=token, tokens=tokens)
        missing = [flag for flag, path in given.items() if not path]
        if missing:
            raise CredentialsError(
                f"mutual TLS needs --tls-ca, --tls-cert and --tls-key together: "
                f"{', '.join(missing)} missing"
            )
        data = {}
        for flag, path in given.items():
            try:
                data[flag] = Path(str(path)).read_bytes()
            except OSError as e:
                raise CredentialsError(f"{flag} {path}: {e.strerror or e}") from None
        principal = _checked_pair(
            data["--tls-ca"], data["--tls-cert"], data["--tls-key"], str(ca), str(cert), str(key)
        )
        # Served dynamically, so that SIGHUP can put a replaced pair in place (issue 37).
        files = (Path(str(cert)), Path(str(key)))
        renewable = RenewableCertificate(
            data["--tls-cert"], data["--tls-key"], files[0].parent, files=files
        )
        return cls(
            ca=data["--tls-ca"],
            cert=data["--tls-cert"],
            key=data["--tls-key"],
            principal=principal,
            token=token,
            tokens=tokens,
            renewable=renewable,
        )

    def reload_certificate(self) -> str:
        """Re-reads --tls-cert and --tls-key (on SIGHUP) and, once they check out as at start
        (this CA, a matching key, in date, the same principal), serves and presents them: the
        next handshakes and new channels use them; calls under way keep theirs. Returns what
        was loaded; CredentialsError (the old pair stays) otherwise."""
        renewable = self.renewable
        if renewable is None or renewable.files is None:
            raise CredentialsError("no --tls-cert and --tls-key files to re-read")
        cert_path, key_path = renewable.files
        try:
            cert, key = cert_path.read_bytes(), key_path.read_bytes()
        except OSError as e:
            raise CredentialsError(f"{e.filename}: {e.strerror or e}") from None
        assert self.ca is not None
        principal = _checked_pair(self.ca, cert, key, "(the CA in use)", cert_path, key_path)
        if principal != self.principal:
            raise CredentialsError(
                f"--tls-cert {cert_path} names {principal!r}, not {self.principal!r}: a "
                "daemon keeps its name while it runs (restart it to take another)"
            )
        if (cert, key) != renewable.current_pair():
            renewable.replace(cert, key)
        return f"{cert_path} for {principal!r}, valid until {_not_after(cert)}"

    @classmethod
    def from_env(cls) -> Credentials:
        """From AGORA_TLS_CA, AGORA_TLS_CERT, AGORA_TLS_KEY and AGORA_TOKEN_FILE (for the SDK
        and scripts)."""
        return cls.load(
            os.environ.get("AGORA_TLS_CA") or None,
            os.environ.get("AGORA_TLS_CERT") or None,
            os.environ.get("AGORA_TLS_KEY") or None,
            os.environ.get("AGORA_TOKEN_FILE") or None,
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        assert self.secure and self.key is not None and self.cert is not None
        # Mutual: a caller without a certificate of this CA does not get past the handshake;
        # with --tokens a token says who calls instead, and no certificate is asked for.
        if self.renewable is None:
            return grpc.ssl_server_credentials(
                [(self.key, self.cert)],
                root_certificates=self.ca,
                require_client_auth=self.tokens is None,
            )
        renewable, served = self.renewable, [self.renewable.version]

        def configuration():
            return grpc.ssl_server_certificate_configuration(
                [(renewable.key, renewable.cert)], root_certificates=self.ca
            )

        def fetch():  # at each handshake: the renewed pair once there is one, else no change
            if renewable.version == served[0]:
                return None
            served[0] = renewable.version
            return configuration()

        return grpc.dynamic_ssl_server_credentials(
            configuration(), fetch, require_client_authentication=self.tokens is None
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        assert self.secure
        cert, key = self.current()
        tls = grpc.ssl_channel_credentials(self.ca, key, cert)
        if self.token is None:
            return tls
        return grpc.composite_channel_credentials(
            tls, grpc.access_token_call_credentials(self.token)
        )


INSECURE = Credentials()


def reload_certificate_said(credentials: Credentials, log) -> bool:
    """SIGHUP's certificate part for any daemon: reloads --tls-cert/--tls-key when they were
    given as files, saying what happened in `log` (structlog); False when nothing changed."""
    renewable = credentials.renewable
    if not credentials.secure or renewable is None or renewable.files is None:
        return False
    try:
        what = credentials.reload_certificate()
    except CredentialsError as e:
        log.error("certificate not reloaded; the one in use stays", error=str(e))
        return False
    log.info("certificate reloaded", certificate=what)
    return True


def _checked_pair(ca: bytes, cert: bytes, key: bytes, ca_name, cert_name, key_name) -> str:
    """The principal of `cert` once it and `key` check out: PEM, in date, the key of the
    certificate, signed by `ca`; CredentialsError naming the file otherwise."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca_cert = _certificate(ca, f"--tls-ca {ca_name}")
    own = _certificate(cert, f"--tls-cert {cert_name}")
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as e:
        raise CredentialsError(f"--tls-key {key_name}: not an unencrypted PEM key ({e})") from None
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*spki) != own.public_key().public_bytes(*spki):
        raise CredentialsError(f"--tls-key {key_name} is not the key of --tls-cert {cert_name}")
    try:
        own.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, Exception) as e:  # noqa: BLE001 - any failure: not ours
        raise CredentialsError(
            f"--tls-cert {cert_name} is not signed by the CA in --tls-ca {ca_name} "
            f"({type(e).__name__})"
        ) from None
    names = own.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _not_after(cert_pem: bytes) -> str:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.isoformat()


def _certificate(data: bytes, what: str) -> x509.Certificate:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(data)
    except ValueError as e:
        raise CredentialsError(f"{what}: not a PEM certificate ({e})") from None
    now = datetime.datetime.now(datetime.UTC)
    if cert.not_valid_after_utc < now:
        raise CredentialsError(f"{what}: expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if cert.not_valid_before_utc > now:
        raise CredentialsError(
            f"{what}: not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    return cert


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(what: str, host: str, credentials: Credentials, insecure: bool) -> None:
    """ValueError unless `what` may listen on `host`: loopback, TLS, or an explicit --insecure."""
    if credentials.secure or insecure or is_loopback(host):
        return
    raise ValueError(
        f"{what} would listen on {host} without TLS, so anyone who reaches it could use it: "
        f"give --tls-ca, --tls-cert and --tls-key (see `agora tls`), or --insecure to accept that"
    )


def _load_pair(context, cert_pem: bytes, key_pem: bytes) -> None:
    """Loads a certificate and key into an ssl.SSLContext. load_cert_chain reads files only:
    they are written to a private temporary directory (the key mode 0600) and removed."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_bytes(cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        context.load_cert_chain(cert, key)


def server_principal(address: str, credentials: Credentials, timeout: float = 5.0) -> str:
    """The principal named by the certificate the TLS server at `address` presents, checked as
    gRPC checks it (the cluster's CA, the address's host). Blocking: one TLS handshake, made
    with this side's own certificate (servers of the cluster ask for one), nothing sent.

    gRPC's Python channels do not show the server's certificate, so a client that must know
    who it talks to (a framework's API found by name) asks first; OSError or ssl.SSLError when
    the handshake fails."""
    import socket
    import ssl

    from agora.common.rpc import parse_address

    assert credentials.secure and credentials.ca is not None
    host, port = parse_address(address)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=credentials.ca.decode())
    context.set_alpn_protocols(["h2"])  # as gRPC offers it
    cert, key = credentials.current()
    if cert is not None and key is not None:
        _load_pair(context, cert, key)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return peer_certificate_principal(tls.getpeercert())


def not_served_by(
    address: str, principal: str, what: str, credentials: Credentials, timeout: float = 5.0
) -> str | None:
    """Why `what` at `address` is not served by `principal` (its certificate names someone
    else, or the handshake failed), for the refusal; None when it is. Blocking."""
    import ssl

    try:
        presented = server_principal(address, credentials, timeout)
    except (OSError, ssl.SSLError) as e:
        return f"could not check who serves {what} at {address}: {e}"
    if presented != principal:
        return (
            f"{what} at {address} presents a certificate for {presented or '(no name)'!r}, "
            f"not for {principal or 'an anonymous caller'!r} who registered the framework: "
            "refusing to talk to it (reserve the framework's name for its daemon in the "
            "master's ACLs: register_frameworks with names:)"
        )
    return None


def server_ssl_context(credentials: Credentials):
    """An ssl.SSLContext serving HTTPS with the daemon's certificate (for its HTTP layer)."""
    import ssl

    assert credentials.secure and credentials.cert is not None and credentials.key is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # A client certificate of the cluster's CA is asked for but not required: a browser without
    # one still gets the page (as an anonymous caller, whom the ACLs may refuse), a person or a
    # script with one is known by its name (`http_principal`), and one from another CA is refused.
    context.verify_mode = ssl.CERT_OPTIONAL
    assert credentials.ca is not None
    context.load_verify_locations(cadata=credentials.ca.decode())

    def load(cert_pem: bytes, key_pem: bytes) -> None:
        _load_pair(context, cert_pem, key_pem)

    load(*credentials.current())  # type: ignore[arg-type]
    if credentials.renewable is not None:
        # A renewed pair goes into this same context: the next handshakes present it.
        credentials.renewable.listeners.append(load)
    return context


def add_port(server: grpc.aio.Server, where: str, credentials: Credentials = INSECURE) -> int:
    """Binds "host:port" with TLS when `credentials` are secure; returns the port bound.

    OSError if it cannot be bound (grpc says so with RuntimeError, or port 0).
    """
    try:
        if credentials.secure:
            port = server.add_secure_port(where, credentials.server_credentials())
        else:
            port = server.add_insecure_port(where)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot bind {where}: the address is in use or not this machine's")
    return port


def _check_token_transport(address: str, credentials: Credentials) -> None:
    """A token in plaintext goes only to this machine: elsewhere anyone on the path reads it."""
    if credentials.token is None or credentials.secure:
        return
    host = address.rsplit(":", 1)[0] if ":" in address else address
    if not is_loopback(host):
        raise CredentialsError(
            f"a bearer token would travel in plaintext to {address}: give --tls-ca (the "
            "cluster's CA) so it goes over TLS"
        )


def aio_channel(
    address: str, credentials: Credentials = INSECURE, options: Iterable = ()
) -> grpc.aio.Channel:
    options = list(options)
    if credentials.secure:
        return grpc.aio.secure_channel(address, credentials.channel_credentials(), options)
    if credentials.token is not None:
        _check_token_transport(address, credentials)
        return grpc.aio.insecure_channel(
            address, options, interceptors=[BearerInterceptor(credentials.token)]
        )
    return grpc.aio.insecure_channel(address, options)


def sync_channel(
    address: str, credentials: Credentials = INSECURE, options: Iterable = ()
) -> grpc.Channel:
    options = list(options)
    if credentials.secure:
        return grpc.secure_channel(address, credentials.channel_credentials(), options)
    if credentials.token is not None:
        _check_token_transport(address, credentials)
        return grpc.intercept_channel(
            grpc.insecure_channel(address, options), SyncBearerInterceptor(credentials.token)
        )
    return grpc.insecure_channel(address, options)


def peer_certificate_principal(peercert: dict | None) -> str:
    """The common name in an ssl peer certificate (`SSLSocket.getpeercert()`); "" without one."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def caller_principal(context) -> str:
    """The calling peer's principal: its certificate's common name, else its bearer token's
    principal (common.tokens); "" for an anonymous caller."""
    names = context.auth_context().get("x509_common_name") or []
    if names:
        return names[0].decode()
    return token_principal() or ""


def handshake_refusal(details: str, address: str, credentials: Credentials) -> str | None:
    """What a failed connection's gRPC details say about TLS, for people; None if nothing.

    A server that refuses a caller's certificate (none, another CA's, one it no longer takes)
    closes the connection in the TLS handshake, before any call: gRPC reports UNAVAILABLE, not
    UNAUTHENTICATED, so the caller's side names the cause from what the handshake said."""
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            f"the certificate of {address} is not signed by the CA in --tls-ca: give the "
            "cluster's CA (or the right address)"
        )
    if "Hostname Verification Check failed" in details:
        host = address.rpartition(":")[0].strip("[]") or address
        return (
            f"the certificate {address} presents does not name {host}: it was issued for other "
            f"addresses (or is another machine's). Issue that daemon's certificate with "
            f"`agora tls issue ... --host {host}` and restart it, or reach it at an address its "
            "certificate names"
        )
    if credentials.secure and "Socket closed" in details:
        if credentials.cert is None:
            return (
                f"{address} closed the TLS handshake: it asks for a client certificate; give "
                "--tls-cert and --tls-key of the cluster's CA (`agora tls issue`), or use a "
                "--token-file if it takes tokens"
            )
        return (
            f"{address} refused this caller's certificate in the TLS handshake: it is not signed "
            "by the CA the daemon trusts, or has been replaced; use one from `agora tls issue "
            "--ca <the cluster's CA>`"
        )
    if not credentials.secure and (
        "Socket closed" in details or "WRONG_VERSION" in details or "handshake" in details.lower()
    ):
        return f"{address} speaks TLS: give --tls-ca, --tls-cert and --tls-key (see `agora tls`)"
    return None
