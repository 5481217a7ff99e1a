"""The tests' image: the lab's offline busybox image (experiments/busybox_image.py)."""

from agora.experiments.busybox_image import OS_RELEASE, build_image, tools_missing

__all__ = ["OS_RELEASE", "build_image", "tools_missing"]
