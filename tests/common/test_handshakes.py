"""The filter that turns gRPC core's failed-handshake lines into counted refusals (pure parts)."""

from __future__ import annotations

import os

from agora.common.handshakes import _route, classify

NO_CERT = (
    "I1125 03:02:12.413785    3577 ssl_transport_security.cc:2563] Handshake failed with error "
    "SSL_ERROR_SSL: error:100000c0:SSL routines:OPENSSL_internal:PEER_DID_NOT_RETURN_A_CERTIFICATE"
)
EXPIRED = (
    "I1125 03:02:12.413785    3577 ssl_transport_security.cc:2563] Handshake failed with error "
    "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: "
    "certificate has expired"
)


def test_each_openssl_cause_has_a_reason():
    assert classify(NO_CERT)[0] == "no_certificate"
    assert classify(EXPIRED)[0] == "expired_certificate"
    assert classify("... unable to get local issuer certificate")[0] == "unknown_ca"
    assert classify("... something new")[0] == "handshake_failed"


def test_handshake_lines_are_counted_other_core_info_dropped_the_rest_passed_through():
    read_end, write_end = os.pipe()
    seen = []
    lines = [
        NO_CERT,
        "I1125 03:02:12.000001    3577 chttp2_transport.cc:100] some other core detail",
        "W1125 03:01:01.706651   12040 log.cc:102] Log level INFO is not suitable for production.",
        "E1125 03:02:12.000001    3577 server.cc:10] a real core error",
        "2026-11-25T03:02:12Z [info     ] master started  address=127.0.0.1:5050",
    ]
    for line in lines:
        _route((line + "\n").encode(), write_end, lambda reason, words: seen.append(reason))
    os.close(write_end)
    passed = os.read(read_end, 65536).decode()
    os.close(read_end)
    assert seen == ["no_certificate"]
    assert "a real core error" in passed and "master started" in passed
    assert "some other core detail" not in passed and "Log level INFO" not in passed
    assert "Handshake failed" not in passed
