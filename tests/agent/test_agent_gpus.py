"""Issue 35: GPUs as whole devices, each held by one task, found by nvidia-smi (a fake one here:
this machine has no GPU) or listed by the operator. The rules alone, then a batch job on a real
agent with two fake GPUs."""

from __future__ import annotations

import json
import os
import stat

import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.agent.gpus import GpuError, GpuSet, detect_gpus, parse_nvidia_smi, visible_env
from agora.agent.oci import runtime_config
from agora.frameworks.batch import pending
from agora.v1 import batch_pb2 as B

SMI_OUTPUT = "0, GPU-1111\n1, GPU-2222\n"


def test_nvidia_smi_lines_give_the_device_indices():
    assert parse_nvidia_smi(SMI_OUTPUT) == ["0", "1"]
    assert parse_nvidia_smi("No devices were found\n") == []


def test_each_device_goes_to_one_task_at_a_time_and_only_whole():
    gpus = GpuSet(["0", "1"])
    assert gpus.take("run-a", 1) == ["0"]
    assert gpus.take("run-b", 1) == ["1"]
    with pytest.raises(GpuError, match="0 free of 2"):
        gpus.take("run-c", 1)
    gpus.release("run-a")
    assert gpus.take("run-c", 1) == ["0"]
    with pytest.raises(GpuError, match="whole number"):
        gpus.take("run-d", 0.5)
    assert gpus.take("run-e", 0) == []
    recovered = GpuSet(["0", "1"])
    recovered.hold("run-b", ["1", "7"])  # a device no longer listed is ignored
    assert recovered.free() == ["0"]


def test_the_operator_lists_devices_or_they_are_found(tmp_path, monkeypatch):
    assert detect_gpus("0,2") == ["0", "2"]
    with pytest.raises(ValueError, match="device indices"):
        detect_gpus("0,zero")
    fake_smi(tmp_path, monkeypatch)
    assert detect_gpus() == ["0", "1"]


def test_a_task_without_gpus_on_a_gpu_agent_sees_none():
    assert visible_env([]) == {
        "CUDA_VISIBLE_DEVICES": "",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    assert visible_env(["1"])["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_containers_gpu_nodes_are_its_only_extra_devices():
    config = runtime_config(
        argv=["true"], env={}, rootfs="/r", sandbox="/s", uid=0, gid=0, groups=[],
        hostname="t", devices=[("/dev/nvidia1", 195, 1)],
    )  # fmt: skip
    assert config["linux"]["devices"] == [
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 0o666}
    ]
    assert config["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"}
    ]


def fake_smi(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{SMI_OUTPUT}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.fixture
async def gpu_cluster(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch)  # the agent finds two GPUs
    c = await BatchCluster(tmp_path, agent_resources=["cpus:4;mem:1024;disk:1024"]).start()
    yield c
    await c.stop()


@pytest.mark.e2e
async def test_two_gpu_tasks_see_different_devices_and_a_third_waits(gpu_cluster, tmp_path):
    cluster = gpu_cluster
    assert cluster.agents[0].resources.scalar("gpus") == 2
    gate = tmp_path / "go"
    script = f"echo $CUDA_VISIBLE_DEVICES; while [ ! -f {gate} ]; do sleep 0.05; done"
    submitted = await cluster.cli(
        "job", "submit", "--gpus", "1", "--instances", "3", "--json", "--", script
    )
    assert submitted.code == 0, submitted.err
    job_id = json.loads(submitted.out)["job_id"]

    async def two_running():
        job = await cluster.job(job_id)
        return job if job.counts.running == 2 and job.counts.pending == 1 else None

    job = await eventually_async(two_running, timeout=30, message="two running, one waiting")
    assert pending.name(job.pending_reason) == "resources"
    work_dir = cluster.agents[0].config.work_dir

    def devices_seen() -> list[str]:
        out = []
        for stdout in work_dir.glob("sandboxes/*/*/stdout"):
            out += stdout.read_text().split()
        return sorted(out)

    await eventually_async(lambda: devices_seen() == ["0", "1"], timeout=30, message="0 and 1")
    gate.touch()
    done = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
    assert done.counts.succeeded == 3
    assert len(devices_seen()) == 3 and set(devices_seen()) <= {"0", "1"}


def test_a_container_with_an_init_runs_its_command_under_it():
    config = runtime_config(
        argv=["sleep", "5"], env={}, rootfs="/r", sandbox="/s", uid=0, gid=0, groups=[],
        hostname="t", init="/var/cache/agora/agora-task-wrapper-x",
    )  # fmt: skip
    assert config["process"]["args"] == ["/dev/init", "--init", "--", "sleep", "5"]
    (mount,) = [m for m in config["mounts"] if m["destination"] == "/dev/init"]
    assert mount["source"] == "/var/cache/agora/agora-task-wrapper-x" and "ro" in mount["options"]
    plain = runtime_config(
        argv=["sleep", "5"], env={}, rootfs="/r", sandbox="/s", uid=0, gid=0, groups=[],
        hostname="t",
    )  # fmt: skip
    assert plain["process"]["args"] == ["sleep", "5"]


def test_only_a_static_wrapper_is_a_containers_init(monkeypatch):
    """An image has none of the host's C library: a wrapper that needs one cannot be its init
    (readelf, from binutils, is the independent judge here)."""
    from agora.agent import native_wrapper

    built = native_wrapper.wrapper_path()
    assert built is not None, "the agent's C wrapper is built on this host (make system-deps)"
    assert native_wrapper.static_wrapper() == (built if _interp_free(built) else None)
    monkeypatch.setattr(native_wrapper, "wrapper_path", lambda: "/bin/sh")  # dynamic
    assert native_wrapper.static_wrapper() is None


def _interp_free(path) -> bool:
    import subprocess

    out = subprocess.run(["readelf", "-l", str(path)], capture_output=True, text=True).stdout
    return "INTERP" not in out and "Program Headers" in out
