"""What this host can do for an agent, checked before it joins (`agora agent --check`).

Each check reads the host and says ok, warn (the agent runs, with less than it could) or fail
(the agent would not run as configured), with one line on what it found and what to change.
Only reads: nothing is created, no cgroup is made, nothing listens.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agora.common import Resources

__all__ = ["Check", "run_checks"]

OK, WARN, FAIL = "ok", "warn", "fail"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NAMESPACES = ("pid", "mnt", "net", "ipc", "uts", "user", "cgroup")
CERT_WARN_DAYS = 30


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn or fail
    detail: str


def cgroups(root: Path = CGROUP_ROOT, own_cgroup: str | None = None) -> Check:
    """Which cgroup version, and whether memory and cpu can be given to tasks."""
    if (root / "cgroup.controllers").exists():
        if own_cgroup is None:
            own_cgroup = _own_v2_cgroup()
        here = root / own_cgroup.lstrip("/")
        try:
            available = set((here / "cgroup.controllers").read_text().split())
        except OSError as e:
            return Check("cgroups", WARN, f"v2, but {here} cannot be read ({e.strerror})")
        missing = {"memory", "cpu"} - available
        if missing:
            return Check(
                "cgroups",
                WARN,
                f"v2, but {', '.join(sorted(missing))} not delegated to {here}: tasks get "
                "no memory or CPU limits (enable them in the parent's cgroup.subtree_control, "
                "or run the agent in a systemd unit with Delegate=yes)",
            )
        if not os.access(here, os.W_OK):
            return Check("cgroups", WARN, f"v2 with memory and cpu, but {here} is not writable")
        return Check("cgroups", OK, f"v2 at {root}, memory and cpu available ({here})")
    found = [c for c in ("memory", "cpu") if (root / c / "cgroup.procs").exists()]
    if len(found) == 2:
        writable = all(os.access(root / c, os.W_OK) for c in found)
        if not writable:
            return Check("cgroups", WARN, "v1 memory and cpu, but not writable by this user")
        return Check("cgroups", OK, f"v1 at {root}, memory and cpu hierarchies")
    return Check(
        "cgroups",
        WARN,
        "none usable: tasks get process groups and rlimits only (--isolation none)",
    )


def _own_v2_cgroup() -> str:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:] or "/"
    except OSError:
        pass
    return "/"


def namespaces(proc_ns: Path = Path("/proc/self/ns")) -> Check:
    """The kernel's namespaces, which container isolation of tasks builds on."""
    present = [n for n in NAMESPACES if (proc_ns / n).exists()]
    missing = [n for n in NAMESPACES if n not in present]
    if missing:
        return Check("namespaces", WARN, f"{', '.join(present)}; missing {', '.join(missing)}")
    return Check("namespaces", OK, ", ".join(present))


def disk(work_dir: Path, offered_mb: float) -> Check:
    """The work dir: where it would be, that it is writable, and room for the disk offered."""
    probe = work_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return Check("disk", FAIL, f"{probe} is not writable: give --work-dir a writable place")
    free_mb = shutil.disk_usage(probe).free / 2**20
    where = f"{work_dir} ({free_mb:,.0f} MB free on its filesystem)"
    if offered_mb > free_mb:
        return Check(
            "disk",
            WARN,
            f"{where}: less than the {offered_mb:,.0f} MB of disk offered; offer less "
            "(--resources 'disk:...') or free space",
        )
    return Check("disk", OK, f"{where}, {offered_mb:,.0f} MB offered")


def ports(
    offered: Resources,
    ephemeral_file: Path = Path("/proc/sys/net/ipv4/ip_local_port_range"),
    listening: Callable[[], set[int]] | None = None,
) -> Check:
    """The ports offered: outside the kernel's ephemeral range (else an outgoing connection
    may take a port a task is promised) and not already listened on."""
    spans = [span for (name, _role), spans in offered.ranges.items() if name == "ports"
             for span in spans]  # fmt: skip
    if not spans:
        return Check("ports", OK, "none offered")
    text = ", ".join(f"{lo}-{hi}" for lo, hi in spans)
    try:
        low, high = (int(x) for x in ephemeral_file.read_text().split())
    except (OSError, ValueError):
        low, high = 0, -1
    clash = [(lo, hi) for lo, hi in spans if lo <= high and hi >= low]
    if clash:
        return Check(
            "ports",
            WARN,
            f"{text} overlaps the kernel's ephemeral range {low}-{high}: an outgoing "
            "connection may take a port offered to a task; offer ports below it",
        )
    taken = sorted(p for p in (listening or _listening_ports)() if any(
        lo <= p <= hi for lo, hi in spans))  # fmt: skip
    if taken:
        shown = ", ".join(str(p) for p in taken[:5]) + (" ..." if len(taken) > 5 else "")
        return Check("ports", WARN, f"{text}: already listened on: {shown}")
    return Check("ports", OK, f"{text}, outside the ephemeral range {low}-{high}, all free")


def _listening_ports() -> set[int]:
    """TCP ports in LISTEN state on this host (IPv4 and IPv6), from /proc/net."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                out.add(int(fields[1].rsplit(":", 1)[1], 16))
    return out


def clock(state: Callable[[], int | None] | None = None) -> Check:
    """Whether the kernel says the clock is synchronized (NTP): task and update times are
    compared across machines."""
    result = (state or _adjtimex_state)()
    if result is None:
        return Check("clock", WARN, "cannot ask the kernel whether the clock is synchronized")
    if result == 5:  # TIME_ERROR: not synchronized
        return Check(
            "clock",
            WARN,
            "not synchronized (adjtimex says TIME_ERROR): run an NTP client (chrony, "
            "systemd-timesyncd) so times agree across machines",
        )
    return Check("clock", OK, f"synchronized; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")


def _adjtimex_state() -> int | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        timex = ctypes.create_string_buffer(512)  # struct timex, modes = 0: read only
        result = libc.adjtimex(timex)
    except (OSError, AttributeError):
        return None
    return None if result < 0 else int(result)


def certificates(cert: Path | None, ca: Path | None, now: float | None = None) -> Check:
    """The agent's certificate: readable, signed by the CA, and how long until it expires."""
    if cert is None:
        return Check("certificates", OK, "none given (plain gRPC: loopback only, or --insecure)")
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError) as e:
        return Check("certificates", FAIL, f"{cert} cannot be read as a PEM certificate: {e}")
    now = time.time() if now is None else now
    left_days = (certificate.not_valid_after_utc.timestamp() - now) / 86400
    name = certificate.subject.rfc4514_string()
    if ca is not None:
        try:
            authority = x509.load_pem_x509_certificate(ca.read_bytes())
            certificate.verify_directly_issued_by(authority)
        except (OSError, ValueError) as e:
            return Check("certificates", FAIL, f"{cert} is not signed by {ca}: {e}")
        except Exception as e:  # cryptography raises InvalidSignature and others
            return Check("certificates", FAIL, f"{cert} is not signed by {ca}: {e!r}")
    if left_days < 0:
        return Check("certificates", FAIL, f"{name}: expired {-left_days:.0f} days ago")
    status = WARN if left_days < CERT_WARN_DAYS else OK
    return Check("certificates", status, f"{name}: expires in {left_days:.0f} days")


def hostname() -> Check:
    """The name and address other machines will be told: loopback cannot be reached."""
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError as e:
        return Check("hostname", WARN, f"{name} does not resolve ({e}); give --advertise-ip")
    if address.startswith("127."):
        return Check(
            "hostname",
            WARN,
            f"{name} resolves to {address}, a loopback address: give --advertise-ip with an "
            "address other machines reach",
        )
    return Check("hostname", OK, f"{name} resolves to {address}")


def run_checks(
    work_dir: Path, resources: Resources, cert: Path | None = None, ca: Path | None = None
) -> list[Check]:
    return [
        cgroups(),
        namespaces(),
        disk(work_dir, resources.scalar("disk")),
        ports(resources),
        clock(),
        certificates(cert, ca),
        hostname(),
    ]
