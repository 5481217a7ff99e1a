"""Finding the Batch API through the master (clients need only the master's address)."""

from __future__ import annotations

from agora.common.credentials import INSECURE, Credentials
from agora.frameworks.sdk import FrameworkNotFound, find_framework_api


class BatchNotFound(FrameworkNotFound):
    """No batch framework has published its address to the master (or it is unreachable)."""


def find_batch_address(
    master: str, name: str = "batch", timeout: float = 5.0, credentials: Credentials = INSECURE
) -> str:
    """The service_address of the framework called `name`: a connected one first, then the
    most recently registered."""
    return find_framework_api(
        master,
        name,
        timeout=timeout,
        credentials=credentials,
        error=BatchNotFound,
        hint=f"start one with `agora batch --master {master}`",
    )
