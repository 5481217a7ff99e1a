"""`agora agent --check`: what this host supports for an agent, before it joins.

The command end to end on this machine (its real cgroups, /proc, disk and certificates made
by `agora tls`), and each check's decisions on host files the test lays out itself.
"""

from __future__ import annotations

import datetime
import json

from harness import agora

from agora.agent.host_check import (
    FAIL,
    OK,
    WARN,
    certificates,
    cgroups,
    clock,
    disk,
    namespaces,
    ports,
)
from agora.common import Resources


def test_the_check_reports_every_part_of_the_host_and_starts_nothing(tmp_path):
    out = agora(
        "agent", "--check", "--json", "--work-dir", str(tmp_path / "w"),
        "--resources", "cpus:1;mem:256;disk:10;ports:[31000-31009]",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    checks = {c["name"]: c for c in json.loads(out.stdout)}
    assert set(checks) == {
        "cgroups", "namespaces", "disk", "ports", "clock", "certificates", "hostname",
    }  # fmt: skip
    assert all(c["status"] in (OK, WARN, FAIL) for c in checks.values())
    assert checks["disk"]["status"] == OK and "10 MB offered" in checks["disk"]["detail"]
    assert not (tmp_path / "w").exists()  # it only reads
    table = agora("agent", "--check", "--work-dir", str(tmp_path / "w"))
    assert table.returncode == 0 and table.stdout.splitlines()[1].split() == [
        "CHECK",
        "STATUS",
        "DETAIL",
    ]


def test_a_certificate_of_another_ca_fails_the_check(tmp_path):
    for ca in ("ca1", "ca2"):
        assert agora("tls", "init", str(tmp_path / ca)).returncode == 0
    made = agora("tls", "issue", "--ca", str(tmp_path / "ca1"), "--name", "agent-1", "--for",
                 "agent")  # fmt: skip
    assert made.returncode == 0, made.stderr
    cert = tmp_path / "ca1" / "agent-1.pem"
    good = agora(
        "agent", "--check", "--json", "--work-dir", str(tmp_path / "w"),
        "--tls-ca", str(tmp_path / "ca1" / "ca.pem"), "--tls-cert", str(cert),
        "--tls-key", str(tmp_path / "ca1" / "agent-1-key.pem"),
    )  # fmt: skip
    (check,) = [c for c in json.loads(good.stdout) if c["name"] == "certificates"]
    assert (
        check["status"] == OK and "agent-1" in check["detail"] and "expires in" in check["detail"]
    )
    bad = agora(
        "agent", "--check", "--work-dir", str(tmp_path / "w"),
        "--tls-ca", str(tmp_path / "ca2" / "ca.pem"), "--tls-cert", str(cert),
        "--tls-key", str(tmp_path / "ca1" / "agent-1-key.pem"),
    )  # fmt: skip
    assert bad.returncode == 1
    assert "is not signed by" in bad.stdout


def test_an_expired_certificate_fails_and_one_near_expiry_warns(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-9")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=100))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "cert.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    day = 86400
    after = start.timestamp() + 101 * day
    assert certificates(path, None, now=after).status == FAIL
    assert certificates(path, None, now=start.timestamp() + 90 * day).status == WARN
    assert certificates(path, None, now=start.timestamp() + 10 * day).status == OK
    (tmp_path / "junk.pem").write_text("not a certificate")
    assert certificates(tmp_path / "junk.pem", None).status == FAIL


def test_cgroups_v2_without_memory_delegated_warns_and_v1_is_recognised(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "agents").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
    (v2 / "agents" / "cgroup.controllers").write_text("cpu pids\n")
    check = cgroups(v2, own_cgroup="/agents")
    assert check.status == WARN and "memory not delegated" in check.detail
    (v2 / "agents" / "cgroup.controllers").write_text("cpu memory pids\n")
    assert cgroups(v2, own_cgroup="/agents").status == OK
    v1 = tmp_path / "v1"
    for controller in ("memory", "cpu"):
        (v1 / controller).mkdir(parents=True)
        (v1 / controller / "cgroup.procs").write_text("")
    assert cgroups(v1).detail.startswith("v1")
    assert cgroups(tmp_path / "nothing").detail.startswith("none usable")


def test_ports_in_the_ephemeral_range_or_taken_warn(tmp_path):
    ephemeral = tmp_path / "range"
    ephemeral.write_text("32768\t60999\n")
    offered = Resources.parse("ports:[31000-32999]")
    check = ports(offered, ephemeral, listening=set)
    assert check.status == WARN and "overlaps the kernel's ephemeral range" in check.detail
    below = Resources.parse("ports:[31000-31999]")
    assert ports(below, ephemeral, listening=set).status == OK
    taken = ports(below, ephemeral, listening=lambda: {22, 31005})
    assert taken.status == WARN and "31005" in taken.detail


def test_disk_clock_and_namespaces_decisions(tmp_path):
    assert disk(tmp_path / "new" / "dir", offered_mb=1).status == OK
    assert disk(tmp_path, offered_mb=10**12).status == WARN
    assert clock(lambda: 5).status == WARN  # TIME_ERROR: not synchronized
    assert clock(lambda: 0).status == OK
    assert clock(lambda: None).status == WARN
    ns = tmp_path / "ns"
    ns.mkdir()
    for name in ("pid", "mnt", "net"):
        (ns / name).write_text("")
    check = namespaces(ns)
    assert check.status == WARN and "missing ipc, uts, user, cgroup" in check.detail
