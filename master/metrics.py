"""The master's Prometheus metrics (served with --metrics-port).

Live figures are read when scraped from the same views the Operator service answers with (agents
and tasks by state, per-role allocation, shares, weights and quota); gRPC calls are counted by an
interceptor on the master's server. Names follow Prometheus' conventions: `agora_master_` prefix,
`_total` counters, base units.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from agora.common import ResourceError, Resources
from agora.common.metrics import GrpcMetrics
from agora.master.counters import MasterCounters
from agora.v1 import common_pb2, operator_pb2

__all__ = ["MasterMetrics"]

# Reported even at 0, so a query for them finds a series before the first task.
TASK_STATES = [
    common_pb2.TaskState.Name(s)
    for s in (
        common_pb2.TASK_STAGING,
        common_pb2.TASK_STARTING,
        common_pb2.TASK_RUNNING,
        common_pb2.TASK_KILLING,
        common_pb2.TASK_FINISHED,
        common_pb2.TASK_FAILED,
        common_pb2.TASK_KILLED,
        common_pb2.TASK_ERROR,
        common_pb2.TASK_LOST,
    )
]


# An allocation cycle: tens of microseconds for one agent, ~100 ms for 10,000.
CYCLE_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


# Offer latency: about a millisecond event-driven, up to the interval with Mesos' fixed timer.
OFFER_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class BulkHistogram(Collector):
    """A Prometheus histogram that takes many equal observations in one call.

    A cycle offering 10,000 agents observes 10,000 offer latencies, mostly the same value
    (everyone's resources became free at one moment); prometheus_client's Histogram took 8 us
    an observation (two locked increments), a third of that cycle. Observed on the event
    loop's thread only; a scrape reads plain ints.
    """

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...], registry) -> None:
        self.name, self.documentation = name, documentation
        self._bounds = [*sorted(buckets), math.inf]
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += count
        self._sum += value * count

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, buckets = 0, []
        for bound, count in zip(self._bounds, self._counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=self._sum
        )


# MasterCounters field -> (metric name without _total, help).
COUNTERS = {
    "offers_sent": ("agora_master_offers_sent", "Offers sent to frameworks."),
    "offers_accepted": ("agora_master_offers_accepted", "Offers accepted (used to launch)."),
    "offers_declined": ("agora_master_offers_declined", "Offers declined by their framework."),
    "offers_rescinded": (
        "agora_master_offers_rescinded",
        "Offers withdrawn by the master (agent lost or drained, framework gone, timed out).",
    ),
    "offers_timed_out": (
        "agora_master_offers_timed_out",
        "Offers rescinded because their framework held them past --offer-timeout.",
    ),
    "offers_conflicted": (
        "agora_master_offers_conflicted",
        "Optimistic offers rescinded because another framework took their resources first.",
    ),
    "accepts_aborted": (
        "agora_master_accepts_aborted",
        "Optimistic Accepts refused (ABORTED): resources taken first, or a framework below "
        "its fair share had priority.",
    ),
    "holds_met": ("agora_master_holds_met", "Holds that collected their whole shape."),
    "holds_expired": ("agora_master_holds_expired", "Holds that timed out unmet (released)."),
    "tasks_launched": ("agora_master_tasks_launched", "Tasks sent to agents to launch."),
    "agents_refused_busy": (
        "agora_master_agents_refused_busy",
        "New agents told to register later because the master was behind (MASTER_BUSY).",
    ),
    "updates_received": (
        "agora_master_status_updates_received",
        "Status updates received from agents (a resent update counts again).",
    ),
    "updates_forwarded": (
        "agora_master_status_updates_forwarded",
        "Status updates sent on to frameworks, the master's own included.",
    ),
    "updates_acknowledged": (
        "agora_master_status_updates_acknowledged",
        "Acknowledgements from frameworks sent on to agents.",
    ),
    "updates_for_unknown_tasks": (
        "agora_master_status_updates_unknown_task",
        "Status updates for a task no framework launched on that agent: acknowledged and "
        "dropped (a confused or hostile agent).",
    ),
}


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.grpc = GrpcMetrics(self.registry)
        self.calls_refused = Counter(
            "agora_master_calls_refused",
            "Calls refused before their request was read (common/call_gate.py), by reason: "
            "unknown_principal, too_many_calls, too_many_streams, too_large.",
            ["reason"],
            registry=self.registry,
        )
        self.denials = Counter(
            "agora_master_authorization_denials",
            "Calls refused by the ACLs, by action.",
            ["action"],
            registry=self.registry,
        )
        self.preemptions = Counter(
            "agora_master_preemptions",
            "Tasks stopped for another role, by why that role was owed resources (guarantee, "
            "fair share).",
            ["reason"],
            registry=self.registry,
        )
        self.authentication_failures = Counter(
            "agora_master_authentication_failures",
            "Callers refused for their credentials (a refused TLS handshake, a missing or "
            "unknown bearer token), by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.allocation_seconds = Histogram(
            "agora_master_allocation_cycle_seconds",
            "How long one allocation cycle took (sorting, placing and sending offers).",
            buckets=CYCLE_BUCKETS,
            registry=self.registry,
        )
        self.offer_latency_seconds = BulkHistogram(
            "agora_master_offer_latency_seconds",
            "From resources becoming free on an agent (a task ending, a decline, the agent "
            "joining) to the offer of them to a framework.",
            OFFER_LATENCY_BUCKETS,
            self.registry,
        )

    def cycles(self) -> int:
        """Allocation cycles run so far (tests wait for one to have run after a change)."""
        return int(
            self.registry.get_sample_value("agora_master_allocation_cycle_seconds_count") or 0
        )

    def watch(
        self,
        state: Callable[[], operator_pb2.ClusterState],
        offers: Callable[[], int],
        counts: Callable[[], MasterCounters] | None = None,
        awaiting_ack: Callable[[], int] | None = None,
    ) -> None:
        """Reports the cluster through these readers, called at scrape time on the loop."""
        self.registry.register(_Live(state, offers))
        if counts is not None:
            self.registry.register(_Counts(counts, awaiting_ack or (lambda: 0)))


class _Counts(Collector):
    def __init__(self, counts, awaiting_ack) -> None:
        self._counts = counts
        self._awaiting_ack = awaiting_ack

    def collect(self):
        counts = self._counts()
        for field, (name, help_text) in COUNTERS.items():
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], getattr(counts, field))
            yield family
        yield GaugeMetricFamily(
            "agora_master_loop_lag_seconds",
            "How late the master's tick loop last ran: work queued on its event loop.",
            value=counts.loop_lag_seconds,
        )
        yield GaugeMetricFamily(
            "agora_master_intake_lag_seconds",
            "Median wait of the agents' latest heartbeats before the master read them.",
            value=counts.intake_lag_seconds,
        )
        yield GaugeMetricFamily(
            "agora_master_status_updates_awaiting_ack",
            "Tasks whose final status update is not acknowledged by their framework yet.",
            value=self._awaiting_ack(),
        )


def _by_name(protos) -> dict[str, float]:
    try:
        resources = Resources.from_proto(protos)
    except ResourceError:
        return {}
    out: dict[str, float] = {}
    for (name, _role), amount in resources.scalars.items():
        out[name] = out.get(name, 0.0) + amount
    return out


class _Live(Collector):
    def __init__(self, state, offers) -> None:
        self._state = state
        self._offers = offers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        agents = GaugeMetricFamily("agora_master_agents", "Agents by state.", labels=["state"])
        counts: dict[str, int] = {"ACTIVE": 0, "DISCONNECTED": 0, "DRAINING": 0}
        for a in state.agents:
            counts[a.state] = counts.get(a.state, 0) + 1
        for name, n in counts.items():
            agents.add_metric([name], n)
        yield agents

        frameworks = GaugeMetricFamily(
            "agora_master_frameworks", "Frameworks, connected or not.", labels=["connected"]
        )
        connected = sum(1 for f in state.frameworks if f.connected)
        frameworks.add_metric(["true"], connected)
        frameworks.add_metric(["false"], len(state.frameworks) - connected)
        yield frameworks

        tasks = GaugeMetricFamily(
            "agora_master_tasks",
            "Tasks the master knows, by state (ended ones while it remembers them).",
            labels=["state"],
        )
        by_state = dict.fromkeys(TASK_STATES, 0)
        for t in state.tasks:
            name = common_pb2.TaskState.Name(t.state)
            by_state[name] = by_state.get(name, 0) + 1
        for name, n in by_state.items():
            tasks.add_metric([name], n)
        yield tasks

        yield GaugeMetricFamily(
            "agora_master_offers_outstanding",
            "Offers sent and not yet accepted, declined or rescinded.",
            value=self._offers(),
        )
        total = GaugeMetricFamily(
            "agora_master_resources_total",
            "Resources of the registered agents.",
            labels=["resource"],
        )
        for name, amount in _by_name(state.total).items():
            total.add_metric([name], amount)
        yield total

        allocated = GaugeMetricFamily(
            "agora_master_role_allocated",
            "Resources allocated to a role (offered or used by its tasks).",
            labels=["role", "resource"],
        )
        share = GaugeMetricFamily(
            "agora_master_role_dominant_share", "A role's dominant share (DRF).", labels=["role"]
        )
        weight = GaugeMetricFamily("agora_master_role_weight", "A role's weight.", labels=["role"])
        guarantee = GaugeMetricFamily(
            "agora_master_role_quota_guarantee",
            "Resources held back for a role by its quota.",
            labels=["role", "resource"],
        )
        for role in state.roles:
            share.add_metric([role.role], role.dominant_share)
            weight.add_metric([role.role], role.weight)
            for name, amount in _by_name(role.allocated).items():
                allocated.add_metric([role.role, name], amount)
            for name, amount in _by_name(role.quota.guarantee).items():
                guarantee.add_metric([role.role, name], amount)
        yield from (allocated, share, weight, guarantee)

        framework_share = GaugeMetricFamily(
            "agora_master_framework_dominant_share",
            "A framework's dominant share within its role (DRF).",
            labels=["framework_id", "framework", "role"],
        )
        for f in state.frameworks:
            framework_share.add_metric(
                [f.info.framework_id, f.info.name, f.info.role], f.dominant_share
            )
        yield framework_share
