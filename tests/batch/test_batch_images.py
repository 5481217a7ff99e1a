"""Issue 35: a batch job from an image, end to end with real agents: the image's files, a pid
namespace of its own, a clean environment, the sandbox where Mesos puts it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from batch_harness import BatchCluster
from harness import agora, eventually_async
from oci_image import OS_RELEASE, build_image, tools_missing

from agora.v1 import batch_pb2 as B

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    missing = tools_missing()
    assert not missing, f"make system-deps installs these: {missing}"
    return build_image(tmp_path_factory.mktemp("image"))


@pytest.fixture
async def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("AGORA_TEST_AGENT_SECRET", "hunter2")  # the agents' environment
    c = await BatchCluster(tmp_path, agent_resources=["cpus:2;mem:1024;disk:1024"]).start()
    yield c
    await c.stop()


async def import_image(cluster, source: Path) -> Path:
    """`agora agent image import SOURCE --name agora-test` into the agent's work dir."""
    work_dir = cluster.agents[0].config.work_dir
    imported = await asyncio.to_thread(
        agora,
        "agent", "image", "import", str(source), "--name", "agora-test", "--work-dir",
        str(work_dir),
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    return work_dir


async def test_a_job_from_an_image_sees_its_files_alone_and_no_agent_secret(cluster, image):
    layout, archive = image
    work_dir = await import_image(cluster, archive)  # the tar of the layout
    listed = await asyncio.to_thread(
        agora, "agent", "image", "list", "--json", "--work-dir", str(work_dir)
    )
    assert [m["name"] for m in json.loads(listed.stdout)] == ["agora-test"]
    # The operator sees what the agent isolates tasks with.
    agents = await asyncio.to_thread(
        agora, "cluster", "agents", "--json", "--master", cluster.master.address
    )
    (isolation,) = [a["isolation"] for a in json.loads(agents.stdout)]
    assert {"pids", "images:runc", "clean-env"} <= set(isolation), isolation

    script = "cat /etc/os-release; echo ---; ps; echo ---; env; echo ---; pwd; id -u"
    submitted = await cluster.cli("job", "submit", "--image", "agora-test", "--json", "--", script)
    assert submitted.code == 0, submitted.err
    job_id = json.loads(submitted.out)["job_id"]
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
    task_id = job.instances[0].attempts[0].task_id
    sandbox = next(work_dir.glob(f"sandboxes/*/{task_id}"))
    release, ps, env, where = (sandbox / "stdout").read_text().split("---\n")
    assert release == OS_RELEASE
    processes = [line for line in ps.splitlines()[1:] if line.strip()]
    assert 1 <= len(processes) <= 3, ps  # the shell and ps: nothing of the host
    variables = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
    assert "AGORA_TEST_AGENT_SECRET" not in variables
    assert variables["FROM_IMAGE"] == "yes" and variables["PATH"] == "/bin"
    assert variables["AGORA_SANDBOX"] == "/mnt/mesos/sandbox"
    assert where.splitlines()[0] == "/mnt/mesos/sandbox"


async def test_an_image_the_agent_lacks_fails_the_task_saying_so(cluster):
    submitted = await cluster.cli(
        "job", "submit", "--image", "not-imported:1", "--json", "--", "true"
    )
    assert submitted.code == 0, submitted.err
    job = await cluster.wait_state(json.loads(submitted.out)["job_id"], B.JOB_FAILED, timeout=60)
    message = job.instances[0].attempts[-1].message
    assert "image not-imported:1 is not on this agent" in message


def sleepers(seconds: str) -> list[int]:
    """Processes on this host running `sleep SECONDS` (a duration no other test uses)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().split(b"\0")[:2] == [
                    b"sleep",
                    seconds.encode(),
                ]:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_killing_a_job_from_an_image_leaves_nothing_running(cluster, image):
    """The container's processes sit in a cgroup the runtime nests in the task's: a kill
    reaches them there. Its SIGTERM reaches the command, which does not handle it, through the
    container's init: the job ends long before its 60 s kill grace."""
    layout, archive = image
    await import_image(cluster, layout)  # the layout's directory
    submitted = await cluster.cli(
        "job", "submit", "--image", "agora-test", "--kill-grace", "60", "--json", "--",
        "sleep 617",
    )  # fmt: skip
    assert submitted.code == 0, submitted.err
    job_id = json.loads(submitted.out)["job_id"]
    await cluster.wait_state(job_id, B.JOB_RUNNING, timeout=60)
    await eventually_async(lambda: sleepers("617"), timeout=30, message="the sleeper running")
    # Its files are the image's: neither removed nor replaced from under it.
    work_dir = str(cluster.agents[0].config.work_dir)
    for verb in (["rm", "agora-test"], ["import", str(layout), "--name", "agora-test"]):
        refused = await asyncio.to_thread(agora, "agent", "image", *verb, "--work-dir", work_dir)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode != 0 and len(lines) == 1, refused.stderr
        assert "image agora-test is in use by 1 task(s) not yet ended" in lines[0]
        assert "--force" in lines[0]
    killed = await cluster.cli("job", "kill", job_id)
    assert killed.code == 0, killed.err
    await cluster.wait_state(job_id, B.JOB_KILLED, timeout=30)
    await eventually_async(lambda: not sleepers("617"), timeout=30, message="nothing left")

    async def ended() -> str | None:  # the attempt's end, once its terminal update is in
        message = (await cluster.job(job_id)).instances[0].attempts[-1].message
        return message if "SIGTERM" in message or "143" in message else None

    await eventually_async(ended, timeout=30, message="the attempt ended by the SIGTERM")
    removed = await asyncio.to_thread(
        agora, "agent", "image", "rm", "agora-test", "--work-dir", work_dir
    )
    assert removed.returncode == 0, removed.stderr


def test_images_are_pulled_with_skopeo_from_any_transport_it_knows(image, tmp_path):
    """A registry is not reachable here: an OCI archive goes the same way through skopeo, and
    an unreachable registry is one line saying so."""
    layout, archive = image
    work_dir = tmp_path / "agent"
    pulled = agora(
        "agent", "image", "pull", f"oci-archive:{archive}", "--name", "pulled:1",
        "--work-dir", str(work_dir),
    )  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr
    listed = agora("agent", "image", "list", "--json", "--work-dir", str(work_dir))
    (meta,) = json.loads(listed.stdout)
    assert meta["name"] == "pulled:1" and meta["source"] == f"oci-archive:{archive}"
    assert (work_dir / "images" / "pulled:1" / "rootfs" / "bin" / "busybox").exists()
    failed = agora(
        "agent", "image", "pull", "docker://127.0.0.1:1/nothing:1", "--name", "x",
        "--work-dir", str(work_dir),
    )  # fmt: skip
    assert failed.returncode == 1
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "pulling docker://127.0.0.1:1/nothing:1" in failed.stderr
