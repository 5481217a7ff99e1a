"""Join tokens, pure: what proves a joiner holds a token, and what does not."""

from __future__ import annotations

import pytest

from agora.common import join_tokens as jt
from agora.common.certificates import CertificateAuthority, init_ca, new_key, signing_request


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    directory = tmp_path_factory.mktemp("ca")
    init_ca(directory)
    return CertificateAuthority(directory)


def test_a_token_proves_its_holder_for_its_own_request_only(ca):
    token = jt.make(ca.token_key, ca.cert_pem, "agent-7", "agent", 600, ["10.0.0.7"], now=1000.0)
    read = jt.parse(token.encode())
    assert (read.name, read.kind, read.hosts, read.ca_pem) == (
        "agent-7",
        "agent",
        ("10.0.0.7",),
        ca.cert_pem,
    )
    key = ca.token_key
    csr = signing_request(new_key(), "agent-7")
    proof = jt.proof(read.secret, csr)
    assert jt.check(key, read.payload, csr, proof, now=1500.0).token_id == read.token_id
    # The same proof for another key's request (a replay of what crossed the wire): refused.
    other = signing_request(new_key(), "agent-7")
    with pytest.raises(jt.JoinTokenError, match="not one of this cluster's CA"):
        jt.check(key, read.payload, other, proof, now=1500.0)
    # A payload changed to name another principal no longer matches its secret.
    forged = read.payload.replace(b"agent-7", b"agent-8")
    with pytest.raises(jt.JoinTokenError, match="not one of this cluster's CA"):
        jt.check(key, forged, csr, jt.proof(read.secret, csr), now=1500.0)
    with pytest.raises(jt.JoinTokenError, match="has expired"):
        jt.check(key, read.payload, csr, proof, now=1601.0)


def test_another_cas_token_and_garbage_are_refused(ca, tmp_path):
    init_ca(tmp_path)
    stranger = CertificateAuthority(tmp_path)
    token = jt.make(stranger.token_key, stranger.cert_pem, "agent-7", "agent", 600)
    csr = signing_request(new_key(), "agent-7")
    with pytest.raises(jt.JoinTokenError, match="not one of this cluster's CA"):
        jt.check(ca.token_key, token.payload, csr, jt.proof(token.secret, csr))
    for text in ("", "agora-join-v1.x", "hello.world.again", "agora-join-v1.e30.AA"):
        with pytest.raises(jt.JoinTokenError, match="not a join token"):
            jt.parse(text)
    with pytest.raises(jt.JoinTokenError, match="a join token is for one of"):
        jt.make(ca.token_key, ca.cert_pem, "x", "client", 60)
    with pytest.raises(jt.JoinTokenError, match="--ttl must be more than 0"):
        jt.make(ca.token_key, ca.cert_pem, "x", "agent", 0)


def test_the_ca_names_what_the_token_says_whatever_the_request_asks(ca):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    csr = signing_request(new_key(), "root")  # asks to be someone else
    pem = ca.sign_request(csr, "agent-7", "agent", ["10.0.0.7"], days=30)
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "agent-7"
    cert.verify_directly_issued_by(ca.cert)
    with pytest.raises(Exception, match="not a certificate signing request"):
        ca.sign_request(b"junk", "agent-7", "agent", [], days=30)
