"""A renewal's files on disk: what a crash at each step leaves, and what the next start makes
of it (common/renewal.finish_pending); and the token key, whatever the CA key's encoding."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization

from agora.common.certificates import (
    CertificateAuthority,
    init_ca,
    is_pair,
    key_pem,
    new_key,
    signing_request,
)
from agora.common.renewal import finish_pending


def _pair(ca: CertificateAuthority) -> tuple[bytes, bytes]:
    key = new_key()
    cert = ca.sign_request(signing_request(key, "agent-1"), "agent-1", "agent", [], days=1)
    return cert, key_pem(key)


def _state(tmp_path, old, new, written: list[str]) -> None:
    (tmp_path / "cert.pem").write_bytes(old[0])
    (tmp_path / "key.pem").write_bytes(old[1])
    if "cert.new" in written:
        (tmp_path / "cert.pem.new").write_bytes(new[0])
    if "key.new" in written:
        (tmp_path / "key.pem.new").write_bytes(new[1])
    if "cert moved" in written:
        (tmp_path / "cert.pem").write_bytes(new[0])


def test_a_renewal_cut_short_at_any_step_leaves_a_matching_pair(tmp_path):
    init_ca(tmp_path / "ca")
    ca = CertificateAuthority(tmp_path / "ca")
    old, new = _pair(ca), _pair(ca)
    steps = {
        # what was written when the crash came -> the pair the next start must use
        "nothing": ([], old),
        "the new certificate only": (["cert.new"], old),
        "both new files": (["cert.new", "key.new"], new),
        "the certificate moved, not the key": (["cert moved", "key.new"], new),
    }
    for name, (written, expected) in steps.items():
        directory = tmp_path / name.replace(" ", "-")
        directory.mkdir()
        _state(directory, old, new, written)
        finish_pending(directory)
        cert, key = (directory / "cert.pem").read_bytes(), (directory / "key.pem").read_bytes()
        assert is_pair(cert, key), name
        assert cert == expected[0], name
        assert not list(directory.glob("*.new")), name
    # A key file half written is dropped, not installed.
    directory = tmp_path / "torn"
    directory.mkdir()
    _state(directory, old, (new[0], new[1][:40]), ["cert.new", "key.new"])
    finish_pending(directory)
    assert (directory / "cert.pem").read_bytes() == old[0]


def test_the_token_key_is_the_same_whatever_the_ca_keys_encoding(tmp_path):
    init_ca(tmp_path / "pkcs8")
    ca = CertificateAuthority(tmp_path / "pkcs8")
    other = tmp_path / "sec1"
    other.mkdir()
    (other / "ca.pem").write_bytes((tmp_path / "pkcs8" / "ca.pem").read_bytes())
    sec1 = ca.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    (other / "ca-key.pem").write_bytes(sec1.replace(b"\n", b"\r\n"))  # and CRLF line ends
    assert CertificateAuthority(other).token_key == ca.token_key
