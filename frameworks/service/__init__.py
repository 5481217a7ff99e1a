"""The service framework (Marathon-like): long-running apps kept at N healthy instances, with
constraints, restart backoff, rolling updates, endpoints, and the `Services` gRPC API.

    daemon = ServicesDaemon(ServicesConfig(master="127.0.0.1:5050", state_dir="state"))
    await daemon.start()
"""

from agora.frameworks.service.apps import AppError, app_from_mapping, normalize, parse_app_text
from agora.frameworks.service.backoff import RestartBackoff
from agora.frameworks.service.constraints import (
    OPERATORS,
    AgentFacts,
    Constraint,
    ConstraintError,
)
from agora.frameworks.service.daemon import ServicesConfig, ServicesDaemon
from agora.frameworks.service.deploy import InstanceView, Plan, Strategy, plan
from agora.frameworks.service.scheduler import ServiceScheduler

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
