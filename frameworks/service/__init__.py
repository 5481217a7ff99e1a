"""The service framework (Marathon-like): long-running apps kept at N healthy instances, with
constraints, restart backoff, rolling updates, endpoints, and the `Services` gRPC API.

    daemon = ServicesDaemon(ServicesConfig(master="127.0.0.1:5050", state_dir="state"))
    await daemon.start()

Each name loads its module on first use (agora.common.lazy): `agora app`, which reads
`agora.frameworks.service.client`, loads neither the daemon nor the scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common.lazy import exports_on_first_use

if TYPE_CHECKING:
    from agora.frameworks.sdk.constraints import (
        OPERATORS,
        AgentFacts,
        Constraint,
        ConstraintError,
    )
    from agora.frameworks.service.apps import AppError, app_from_mapping, normalize, parse_app_text
    from agora.frameworks.service.backoff import RestartBackoff
    from agora.frameworks.service.daemon import ServicesConfig, ServicesDaemon
    from agora.frameworks.service.deploy import InstanceView, Plan, Strategy, plan
    from agora.frameworks.service.scheduler import ServiceScheduler
else:
    __getattr__, __dir__ = exports_on_first_use(
        __name__,
        {
            "agora.frameworks.service.apps": (
                "AppError",
                "app_from_mapping",
                "normalize",
                "parse_app_text",
            ),
            "agora.frameworks.service.backoff": ("RestartBackoff",),
            "agora.frameworks.sdk.constraints": (
                "OPERATORS",
                "AgentFacts",
                "Constraint",
                "ConstraintError",
            ),
            "agora.frameworks.service.daemon": ("ServicesConfig", "ServicesDaemon"),
            "agora.frameworks.service.deploy": ("InstanceView", "Plan", "Strategy", "plan"),
            "agora.frameworks.service.scheduler": ("ServiceScheduler",),
        },
    )

__all__ = [
    "OPERATORS",
    "AgentFacts",
    "AppError",
    "Constraint",
    "ConstraintError",
    "InstanceView",
    "Plan",
    "RestartBackoff",
    "ServiceScheduler",
    "ServicesConfig",
    "ServicesDaemon",
    "Strategy",
    "app_from_mapping",
    "normalize",
    "parse_app_text",
    "plan",
]
