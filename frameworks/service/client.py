"""Finding the Services API through the master (clients need only the master's address)."""

from __future__ import annotations

from agora.common.credentials import INSECURE, Credentials
from agora.frameworks.sdk import FrameworkNotFound
from agora.frameworks.sdk.discovery import find_framework


class ServicesNotFound(FrameworkNotFound):
    """No service framework has published its address to the master (or it is unreachable)."""


def find_services(
    master: str, name: str = "services", timeout: float = 5.0, credentials: Credentials = INSECURE
):
    """What the master knows of the service framework called `name` (FrameworkSummary): a
    connected one first, then the most recently registered."""
    return find_framework(
        master,
        name,
        timeout=timeout,
        credentials=credentials,
        error=ServicesNotFound,
        hint=f"start one with `agora services --master {master}`",
    )


def find_services_address(
    master: str, name: str = "services", timeout: float = 5.0, credentials: Credentials = INSECURE
) -> str:
    """The service_address of the framework called `name` (see find_services)."""
    return find_services(master, name, timeout, credentials).info.service_address
