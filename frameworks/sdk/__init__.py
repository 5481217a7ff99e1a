"""The framework SDK: subclass `Framework`, fit tasks into offers, and `run` it.

    class Hello(Framework):
        async def on_offers(self, driver, offers):
            result = fit(offers, [TaskSpec("hello", cpus=0.1, mem=32, command="echo hi")])
            for placement in result.placements:
                await driver.launch(placement.offers, placement.tasks)
            await driver.decline(result.unused)

    run(Hello(), master="127.0.0.1:5050", name="hello")

The driver reconnects, re-subscribes with the same framework id, reconciles, and acknowledges
updates. `agora.frameworks.sdk.testing` has an in-memory transport for unit tests of a framework.

Each name loads its module on first use (agora.common.lazy): a client that only finds a
framework's API (`agora job`, `agora app`) loads neither the driver nor the daemon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common.lazy import exports_on_first_use

if TYPE_CHECKING:
    from agora.common.backoff import Backoff
    from agora.common.task_states import TERMINAL_STATES, is_terminal
    from agora.frameworks.sdk.daemon import DaemonConfig, FrameworkDaemon
    from agora.frameworks.sdk.discovery import FrameworkNotFound, find_framework_api
    from agora.frameworks.sdk.driver import (
        Driver,
        SubscriptionEnded,
        framework_info,
        is_stale_stream_error,
        run,
        run_async,
    )
    from agora.frameworks.sdk.errors import OfferConflict, SchedulerError
    from agora.frameworks.sdk.framework import Framework
    from agora.frameworks.sdk.offers import (
        Fit,
        OfferPacker,
        Placement,
        TaskSpec,
        fit,
        offer_resources,
    )
    from agora.frameworks.sdk.state_store import StateStore
    from agora.frameworks.sdk.tasks import (
        argv_command,
        as_command,
        describe_status,
        new_task_id,
        shell_command,
        state_name,
    )
    from agora.frameworks.sdk.transport import (
        EventStream,
        GrpcSchedulerTransport,
        SchedulerTransport,
    )
    from agora.v1.common_pb2 import TaskState  # status.state == TaskState.TASK_FINISHED
else:
    __getattr__, __dir__ = exports_on_first_use(
        __name__,
        {
            "agora.common.backoff": ("Backoff",),
            "agora.common.task_states": ("TERMINAL_STATES", "is_terminal"),
            "agora.frameworks.sdk.daemon": ("DaemonConfig", "FrameworkDaemon"),
            "agora.frameworks.sdk.discovery": ("FrameworkNotFound", "find_framework_api"),
            "agora.frameworks.sdk.driver": (
                "Driver",
                "SubscriptionEnded",
                "framework_info",
                "is_stale_stream_error",
                "run",
                "run_async",
            ),
            "agora.frameworks.sdk.errors": ("OfferConflict", "SchedulerError"),
            "agora.frameworks.sdk.framework": ("Framework",),
            "agora.frameworks.sdk.offers": (
                "Fit",
                "OfferPacker",
                "Placement",
                "TaskSpec",
                "fit",
                "offer_resources",
            ),
            "agora.frameworks.sdk.state_store": ("StateStore",),
            "agora.frameworks.sdk.tasks": (
                "argv_command",
                "as_command",
                "describe_status",
                "new_task_id",
                "shell_command",
                "state_name",
            ),
            "agora.frameworks.sdk.transport": (
                "EventStream",
                "GrpcSchedulerTransport",
                "SchedulerTransport",
            ),
            "agora.v1.common_pb2": ("TaskState",),
        },
    )

__all__ = [
    "TERMINAL_STATES",
    "TaskState",
    "Backoff",
    "DaemonConfig",
    "Driver",
    "EventStream",
    "Fit",
    "Framework",
    "FrameworkDaemon",
    "FrameworkNotFound",
    "GrpcSchedulerTransport",
    "OfferConflict",
    "OfferPacker",
    "Placement",
    "SchedulerError",
    "SchedulerTransport",
    "StateStore",
    "SubscriptionEnded",
    "TaskSpec",
    "argv_command",
    "as_command",
    "describe_status",
    "find_framework_api",
    "fit",
    "framework_info",
    "is_stale_stream_error",
    "is_terminal",
    "new_task_id",
    "offer_resources",
    "run",
    "run_async",
    "shell_command",
    "state_name",
]
