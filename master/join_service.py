"""The Join service on the master's join port: a certificate for a machine with a join token.

Served on a port of its own (--join-port), over TLS with the master's certificate, asking for no
client certificate: a joining machine has none yet, and a token proves who it may become (see
agora/common/join_tokens.py); a joined machine renews by signing its request with the key of the
certificate it holds, here (agents behind a relay reach the master only here) or over mutual TLS
on the main port. The main port keeps asking
every caller for a certificate. Only the leading master serves it (the port is opened with the
rest), since a token is spent in the registry.
"""

from __future__ import annotations

import grpc
import structlog

from agora.common import join_tokens
from agora.common.addresses import peer_host
from agora.common.certificates import CertificateAuthority, CertificateError, names_to_renew
from agora.master.registry_store import RegistryStore
from agora.v1 import join_pb2, join_pb2_grpc

log = structlog.get_logger(__name__)

# A signing request is a few hundred bytes; refuse anything that is not one before parsing it.
MAX_REQUEST_BYTES = 16 * 1024


class JoinService(join_pb2_grpc.JoinServicer):
    def __init__(self, ca: CertificateAuthority, store: RegistryStore, cert_days: float) -> None:
        self.ca, self.store, self.cert_days = ca, store, cert_days
        self._key = ca.token_key

    async def Join(self, request: join_pb2.JoinRequest, context: grpc.aio.ServicerContext):
        if request.ByteSize() > MAX_REQUEST_BYTES:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a join request is at most {MAX_REQUEST_BYTES} bytes",
            )
        peer = peer_host(context.peer())
        try:
            token = join_tokens.check(self._key, request.token_payload, request.csr, request.proof)
        except join_tokens.JoinTokenError as e:
            log.warning("join refused", peer=peer, error=str(e))
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        hosts = [*token.hosts, *([peer] if peer else [])]
        try:
            # Signed before the token is spent: a bad request does not waste it.
            cert = self.ca.sign_request(
                request.csr, token.name, token.kind, hosts, days=self.cert_days
            )
        except CertificateError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if not self.store.spend_join_token(token.token_id, token.expires):
            log.warning("join refused: token used before", peer=peer, principal=token.name)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "this join token was used already (a token joins one machine, once): make "
                "a new one with `agora tls join-token`, or keep the certificate files the "
                "first join wrote",
            )
        log.info("machine joined", principal=token.name, kind=token.kind, peer=peer)
        return join_pb2.JoinResponse(certificate=cert, ca=self.ca.cert_pem, principal=token.name)

    async def Renew(self, request: join_pb2.RenewRequest, context: grpc.aio.ServicerContext):
        if request.ByteSize() > MAX_REQUEST_BYTES:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"a request is at most {MAX_REQUEST_BYTES} bytes"
            )
        # The certificate the caller proved it holds: in the handshake (the main port asks
        # every caller for one of this CA), or by signing its request with that certificate's
        # key (the join port asks for none).
        presented = context.auth_context().get("x509_pem_cert") or []
        if presented:
            held = presented[0]
        elif request.certificate and request.signature:
            held = request.certificate
            why = self.ca.check_held(held, request.signature, request.csr)
            if why is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        else:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "renew presenting the certificate to renew: over mutual TLS, or in the "
                "request with its key's signature of the signing request",
            )
        try:
            name, kind, hosts = names_to_renew(held)
            cert = self.ca.sign_request(request.csr, name, kind, hosts, days=self.cert_days)
        except (CertificateError, ValueError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        log.info("certificate renewed", principal=name, kind=kind)
        return join_pb2.JoinResponse(certificate=cert, ca=self.ca.cert_pem, principal=name)
