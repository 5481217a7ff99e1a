"""NVIDIA GPUs on an agent: found, offered as whole devices, and each given to one task at a time.

Found, unless the operator lists them (`agora agent --gpus 0,1`), the way Mesos' Nvidia GPU
isolator finds them: `nvidia-smi --query-gpu=index,uuid --format=csv,noheader` where it is
installed, else the entries of /proc/driver/nvidia/gpus. The agent then offers `gpus:N` (unless
its --resources name gpus) and, as Mesos does, only whole devices: a task's `gpus` must be a
whole number.

A task's devices are the lowest free ones; no device is given to two tasks. The task sees them
as CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (what CUDA and NVIDIA's container tools
read), and a task from an image also gets their device nodes (/dev/nvidiaN, with
/dev/nvidiactl and /dev/nvidia-uvm where they exist) in its container and nothing else of
the GPUs. Devices are kept in the task's record, so a restarted agent knows which are taken.
The allocation is pure (`GpuSet`); finding them reads the host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

__all__ = ["GpuError", "GpuSet", "detect_gpus", "parse_nvidia_smi", "visible_env"]

PROC_GPUS = "/proc/driver/nvidia/gpus"
SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


class GpuError(Exception):
    """Why a task cannot have the GPUs it asks for."""


def parse_nvidia_smi(text: str) -> list[str]:
    """Device indices from `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`. Pure."""
    found = []
    for line in text.splitlines():
        index = line.split(",", 1)[0].strip()
        if index.isdigit():
            found.append(index)
    return found


def detect_gpus(listed: str | None = None, dev: str = "/dev") -> list[str]:
    """The GPUs to offer: `listed` ("0,1") when the operator gives them, else what nvidia-smi
    or /proc/driver/nvidia says; [] on a host without NVIDIA GPUs."""
    if listed is not None:
        indices = [part.strip() for part in listed.split(",") if part.strip()]
        bad = [i for i in indices if not i.isdigit()]
        if bad or len(set(indices)) != len(indices):
            raise ValueError(f"--gpus {listed!r}: write device indices, e.g. 0,1")
        return indices
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            return parse_nvidia_smi(out)
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        count = len(os.listdir(PROC_GPUS))
    except OSError:
        return []
    return [str(i) for i in range(count) if os.path.exists(f"{dev}/nvidia{i}")]


def visible_env(devices: Iterable[str]) -> dict[str, str]:
    """What a task with these devices sees (a task without any sees none: "void"); CUDA
    numbers devices in nvidia-smi's (PCI) order only when asked to."""
    value = ",".join(devices)
    return {
        "CUDA_VISIBLE_DEVICES": value,
        "NVIDIA_VISIBLE_DEVICES": value or "void",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


class GpuSet:
    """Which of an agent's GPUs each task holds. Pure."""

    def __init__(self, devices: Iterable[str]) -> None:
        self.devices = list(devices)
        self._held: dict[str, list[str]] = {}  # run id -> its devices

    def free(self) -> list[str]:
        taken = {d for held in self._held.values() for d in held}
        return [d for d in self.devices if d not in taken]

    def take(self, run_id: str, count: float) -> list[str]:
        """`count` whole devices for the run, the lowest free; GpuError if it cannot have
        them (not a whole number, or fewer free: the master offered what is not here)."""
        if count != int(count) or count < 0:
            raise GpuError(f"gpus must be a whole number of devices, got {count:g}")
        free = self.free()
        if int(count) > len(free):
            raise GpuError(
                f"asks for {int(count)} GPU(s) and this agent has {len(free)} free of "
                f"{len(self.devices)}"
            )
        held = free[: int(count)]
        if held:
            self._held[run_id] = held
        return held

    def hold(self, run_id: str, devices: Iterable[str]) -> None:
        """A recovered run's devices (from its record)."""
        held = [d for d in devices if d in self.devices]
        if held:
            self._held[run_id] = held

    def release(self, run_id: str) -> None:
        self._held.pop(run_id, None)


def device_nodes(devices: Iterable[str], dev: str = "/dev") -> list[str]:
    """The device files a container with these GPUs needs (those that exist)."""
    nodes = [f"{dev}/nvidia{d}" for d in devices]
    if nodes:
        nodes += [n.replace("/dev", dev, 1) for n in SHARED_NODES]
    return [n for n in nodes if os.path.exists(n)]


__all__ += ["device_nodes"]
