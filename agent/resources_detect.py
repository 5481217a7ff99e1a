"""Resource auto-detection with Mesos' rules, the arithmetic kept apart from reading the host."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil

from agora.common import Resources

MB = 1024 * 1024
# Mesos (src/slave/containerizer/containerizer.cpp) leaves the host this much of its memory
# and disk, or half of it when the machine is small.
MEM_RESERVED_MB = 1024
DISK_RESERVED_MB = 5 * 1024
DEFAULT_PORTS = ((31000, 32000),)


def default_resources(cpus: int, mem_total_mb: float, disk_total_mb: float) -> Resources:
    """The resources an agent offers given the host's totals.

    All CPUs; memory minus 1 GB, or half of it when there is less than 2 GB; disk minus 5 GB, or
    half of it when there is less than 10 GB; ports 31000-32000.
    """
    mem = (
        mem_total_mb - MEM_RESERVED_MB if mem_total_mb >= 2 * MEM_RESERVED_MB else mem_total_mb / 2
    )
    disk = (
        disk_total_mb - DISK_RESERVED_MB
        if disk_total_mb >= 2 * DISK_RESERVED_MB
        else disk_total_mb / 2
    )
    scalars = {
        ("cpus", "*"): float(max(cpus, 1)),
        ("mem", "*"): float(int(max(mem, 0))),
        ("disk", "*"): float(int(max(disk, 0))),
    }
    return Resources(scalars, {("ports", "*"): DEFAULT_PORTS})


def detect_resources(work_dir: Path) -> Resources:
    """Reads the host: usable CPUs, physical memory, and the disk holding `work_dir`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    mem_mb = psutil.virtual_memory().total / MB
    probe = Path(work_dir)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    disk_mb = shutil.disk_usage(probe).total / MB
    return default_resources(cpus, mem_mb, disk_mb)
