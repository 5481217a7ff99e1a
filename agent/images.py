"""The agent's images: OCI images unpacked once into root filesystems that tasks share.

`agora agent image import FILE --name NAME` (or any tool that fills the same directory) takes an
OCI image layout, as a directory or a tar archive of one (what `skopeo copy ... oci:DIR:TAG`,
`umoci`, `buildah push ... oci-archive:` or `docker save` through skopeo make), and unpacks it
with umoci (Debian's `umoci`: it applies the layers, whiteouts included, as the OCI spec says,
which a tar loop of ours would get wrong) into

    WORK_DIR/images/<name>/rootfs        the image's files; read-only to every task
    WORK_DIR/images/<name>/image.json    the image's config (Env, Entrypoint, Cmd, WorkingDir)
    WORK_DIR/images/<name>/meta.json     where it came from, its digest, when it was imported

An image is unpacked once; its tasks mount the same root filesystem read-only (each gets its
own /tmp and sandbox), so a task from an image starts as fast as a plain one after the first.
`agora agent image pull REFERENCE --name NAME` does the same through skopeo, from a registry
(docker://busybox:latest) or any image transport skopeo knows (oci-archive:, docker-archive:).
`agora agent image rm NAME` removes one (GC: the operator's call, as `docker image prune`).
A task naming an image this agent does not have fails at once with that reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Image", "ImageError", "ImageStore", "image_dir_name"]

# A name as Docker writes one: registry/path:tag, letters, digits and . _ - / : @
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")


class ImageError(Exception):
    """What went wrong with an image, in words for the operator or the task's status."""


def image_dir_name(name: str) -> str:
    """The directory of image `name` (with ":latest" when it names no tag or digest)."""
    if not _NAME.match(name) or ".." in name:
        raise ImageError(f"{name!r} is not an image name (e.g. busybox:latest)")
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in name:
        name += ":latest"
    return name.replace("/", "%2F")


@dataclass(frozen=True)
class Image:
    name: str
    rootfs: str
    env: list[str]  # KEY=VALUE, as the image's config has them
    entrypoint: list[str]
    cmd: list[str]
    workdir: str


class ImageStore:
    """The images under `root` (WORK_DIR/images)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, name: str) -> Image:
        """The image called `name`; ImageError when this agent does not have it."""
        where = self.root / image_dir_name(name)
        try:
            config = json.loads((where / "image.json").read_text()).get("config") or {}
        except FileNotFoundError:
            raise ImageError(
                f"image {name} is not on this agent; import it with `agora agent image import "
                f"FILE --name {name} --work-dir ...`"
            ) from None
        except (OSError, ValueError) as e:
            raise ImageError(f"image {name} is damaged ({e}); import it again") from None
        return Image(
            name=name,
            rootfs=str(where / "rootfs"),
            env=list(config.get("Env") or []),
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            workdir=config.get("WorkingDir") or "/",
        )

    def list(self) -> list[dict]:
        out = []
        for meta in sorted(self.root.glob("*/meta.json")):
            try:
                out.append(json.loads(meta.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def remove(self, name: str) -> bool:
        where = self.root / image_dir_name(name)
        if not where.exists():
            return False
        shutil.rmtree(where)
        return True

    def pull(self, reference: str, name: str) -> dict:
        """Copies the image at `reference` with skopeo (Debian's `skopeo`: registries and
        every image transport, under /etc/containers/policy.json) into an OCI layout, then
        imports it as `name`. `reference` is a skopeo one: docker://busybox:latest from a
        registry, oci-archive:FILE, docker-archive:FILE (what `docker save` wrote)."""
        skopeo = shutil.which("skopeo")
        if skopeo is None:
            raise ImageError("skopeo is not installed (apt-get install skopeo)")
        if ":" not in reference:
            raise ImageError(
                f"{reference!r}: give a transport, e.g. docker://{reference} or "
                f"oci-archive:{reference}"
            )
        _make_private(self.root)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".pull-") as scratch:
            layout = Path(scratch) / "layout"
            _run(
                [skopeo, "copy", "--quiet", reference, f"oci:{layout}:pulled"],
                f"pulling {reference}",
            )
            meta = self.import_layout(layout, name, "pulled")
        meta["source"] = reference
        (self.root / image_dir_name(name) / "meta.json").write_text(json.dumps(meta))
        return meta

    def import_layout(self, source: Path, name: str, tag: str | None = None) -> dict:
        """Unpacks the OCI layout at `source` (a directory, or a tar of one) as `name`; `tag`:
        which of the layout's tags (default: its only one). Returns the image's meta."""
        dest = self.root / image_dir_name(name)
        _make_private(self.root)
        umoci = shutil.which("umoci")
        if umoci is None:
            raise ImageError("umoci is not installed (apt-get install umoci)")
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".import-") as scratch:
            layout = Path(source)
            if layout.is_file():
                layout = Path(scratch) / "layout"
                _untar(Path(source), layout)
            if not (layout / "index.json").exists():
                raise ImageError(f"{source}: not an OCI image layout (no index.json)")
            tag = tag or _only_tag(layout)
            bundle = Path(scratch) / "bundle"
            ref = f"{layout}:{tag}"
            _run([umoci, "unpack", "--image", ref, str(bundle)], f"unpacking {source}")
            image_config, history = _image_config(layout, tag)
            staged = Path(scratch) / "image"
            staged.mkdir()
            os.rename(bundle / "rootfs", staged / "rootfs")
            (staged / "image.json").write_text(json.dumps(image_config))
            meta = {
                "name": name,
                "source": str(source),
                "tag": tag,
                "layers_history": history,
                "imported_at": time.time(),
            }
            (staged / "meta.json").write_text(json.dumps(meta))
            if dest.exists():  # a new version of the name: running tasks keep their files
                old = Path(scratch) / "old"
                os.rename(dest, old)
            os.rename(staged, dest)
        return meta


def _make_private(root: Path) -> None:
    """The images' directory is root's alone (0700): an image's files, setuid programs
    included, are for its containers (the runtime, as root, reaches them), never for a task on
    the host to run."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)


def _image_config(layout: Path, tag: str) -> tuple[dict, int]:
    """The image config of `tag` (its Env, Entrypoint, Cmd, WorkingDir under "config") and how
    many history entries it has, read from the layout's blobs as the OCI image spec lays them
    out: index.json -> the tag's manifest -> its config blob."""
    try:
        index = json.loads((layout / "index.json").read_text())
        manifest = next(
            m
            for m in index.get("manifests", [])
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
        )
        body = json.loads(_blob(layout, manifest["digest"]))
        config = json.loads(_blob(layout, body["config"]["digest"]))
    except (OSError, ValueError, KeyError, StopIteration) as e:
        raise ImageError(f"{layout}: cannot read the image config of {tag!r} ({e!r})") from None
    return config, len(config.get("history") or [])


def _blob(layout: Path, digest: str) -> bytes:
    algorithm, _, hexdigest = digest.partition(":")
    if not algorithm.isalnum() or not hexdigest.isalnum():
        raise ValueError(f"a strange digest {digest!r}")
    return (layout / "blobs" / algorithm / hexdigest).read_bytes()


def _only_tag(layout: Path) -> str:
    index = json.loads((layout / "index.json").read_text())
    tags = [
        m.get("annotations", {}).get("org.opencontainers.image.ref.name")
        for m in index.get("manifests", [])
    ]
    tags = [t for t in tags if t]
    if len(tags) != 1:
        raise ImageError(f"the layout has tags {tags or 'none'}; say which with --tag")
    return tags[0]


def _untar(archive: Path, dest: Path) -> None:
    dest.mkdir()
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise ImageError(f"{archive}: not a tar archive of an OCI layout ({e})") from None


def _run(argv: list[str], doing: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise ImageError(f"{doing}: {last}")
    return result.stdout
