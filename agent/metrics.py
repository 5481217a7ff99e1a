"""The agent's Prometheus metrics (served with --metrics-port): tasks, launches, updates, usage.

Counters and the launch histogram are updated by the task manager as things happen; the rest
is read from the daemon when scraped. Per-task usage comes from the last usage sample (the
daemon samples every few seconds off the event loop), so a scrape never walks sandboxes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from agora.v1 import agent_pb2, common_pb2

__all__ = ["AgentMetrics"]

# RunTask received -> the command running: a few ms here, up to seconds on a loaded host.
LAUNCH_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.launch_seconds = Histogram(
            "agora_agent_task_launch_seconds",
            "Time from the master's RunTask to the task's command running.",
            buckets=LAUNCH_BUCKETS,
            registry=self.registry,
        )
        self.tasks_ended = Counter(
            "agora_agent_tasks_ended",
            "Tasks that reached a terminal state on this agent, by state.",
            ["state"],
            registry=self.registry,
        )

        self.denials = Counter(
            "agora_agent_authorization_denials",
            "Calls of the Agent service refused by the ACLs (agent/file_access.py), by action.",
            ["action"],
            registry=self.registry,
        )

        self.authentication_failures = Counter(
            "agora_agent_authentication_failures",
            "Callers refused for their credentials (a refused TLS handshake, a missing or "
            "unknown bearer token), by reason.",
            ["reason"],
            registry=self.registry,
        )

    def task_ended(self, state: int) -> None:
        self.tasks_ended.labels(common_pb2.TaskState.Name(state)).inc()

    def watch(
        self,
        registered: Callable[[], bool],
        task_states: Callable[[], Iterable[int]],
        pending_updates: Callable[[], int],
        usage: Callable[[], agent_pb2.GetUsageResponse | None],
    ) -> None:
        """Reports the daemon's live figures through these readers (called at scrape time)."""
        self.registry.register(_Live(registered, task_states, pending_updates, usage))


class _Live(Collector):
    def __init__(self, registered, task_states, pending_updates, usage) -> None:
        self._registered = registered
        self._task_states = task_states
        self._pending = pending_updates
        self._usage = usage

    def collect(self):
        yield GaugeMetricFamily(
            "agora_agent_registered",
            "1 while the agent is registered with a master.",
            value=1 if self._registered() else 0,
        )
        by_state = GaugeMetricFamily(
            "agora_agent_tasks", "Tasks on this agent not yet ended, by state.", labels=["state"]
        )
        counts: dict[int, int] = {}
        for state in self._task_states():
            counts[state] = counts.get(state, 0) + 1
        for state in (common_pb2.TASK_STARTING, common_pb2.TASK_RUNNING, common_pb2.TASK_KILLING):
            by_state.add_metric([common_pb2.TaskState.Name(state)], counts.get(state, 0))
        yield by_state
        yield GaugeMetricFamily(
            "agora_agent_status_updates_pending",
            "Status updates sent or to send and not yet acknowledged by their framework.",
            value=self._pending(),
        )
        yield from _usage_families(self._usage())


def _usage_families(sample: agent_pb2.GetUsageResponse | None):
    labels = ["framework_id", "task_id"]
    cpu = CounterMetricFamily(
        "agora_agent_task_cpu_seconds",
        "CPU time a running task has used, by mode.",
        labels=[*labels, "mode"],
    )
    rss = GaugeMetricFamily(
        "agora_agent_task_memory_rss_bytes", "A running task's anonymous memory.", labels=labels
    )
    limit = GaugeMetricFamily(
        "agora_agent_task_memory_limit_bytes",
        "The memory limit a running task is held to (0: none).",
        labels=labels,
    )
    disk = GaugeMetricFamily(
        "agora_agent_task_disk_used_bytes", "What a task's sandbox takes on disk.", labels=labels
    )
    for u in sample.usage if sample is not None else ():
        key = [u.framework_id, u.task_id]
        cpu.add_metric([*key, "user"], u.cpu_user_seconds)
        cpu.add_metric([*key, "system"], u.cpu_system_seconds)
        rss.add_metric(key, u.mem_rss_bytes)
        limit.add_metric(key, u.mem_limit_bytes)
        disk.add_metric(key, u.disk_used_bytes)
    yield from (cpu, rss, limit, disk)
