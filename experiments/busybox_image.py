"""A small OCI image built offline, for the container tests and `agora experiment throughput
--isolation image`: busybox (Debian's busybox-static) and an /etc/os-release of its own, packed
into an OCI layout with umoci, and a tar of it. Nothing is downloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

OS_RELEASE = 'NAME="Agora test image"\nID=agora-busybox\nVERSION_ID=1\n'
APPLETS = ("sh", "ps", "cat", "env", "ls", "echo", "sleep", "id", "kill", "mount", "true")


def tools_missing() -> list[str]:
    need = {"umoci": shutil.which("umoci"), "runc": shutil.which("runc")}
    need["busybox-static"] = "/bin/busybox" if os.path.exists("/bin/busybox") else None
    return [name for name, path in need.items() if path is None]


def build_image(where: Path, tag: str = "latest") -> tuple[Path, Path]:
    """(the OCI layout directory, a tar archive of it)."""
    layout, bundle = where / "layout", where / "bundle"

    def umoci(*args: str) -> None:
        subprocess.run(["umoci", *args], check=True, capture_output=True)

    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:{tag}")
    umoci("unpack", "--image", f"{layout}:{tag}", str(bundle))
    rootfs = bundle / "rootfs"
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc").mkdir(exist_ok=True)
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "os-release").write_text(OS_RELEASE)
    umoci("repack", "--image", f"{layout}:{tag}", str(bundle))
    umoci(
        "config",
        "--image",
        f"{layout}:{tag}",
        "--config.env",
        "PATH=/bin",
        "--config.env",
        "FROM_IMAGE=yes",
        "--config.workingdir",
        "/",
    )
    archive = where / "image.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(layout, arcname=".")
    return layout, archive
