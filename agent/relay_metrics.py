"""The relay's Prometheus metrics (served with `agora relay --metrics-port`), read when scraped.

The relay counts in plain integers as it carries messages; this collector turns them into
metrics at scrape time, so carrying a message costs an addition and nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agora.agent.relay import Relay

__all__ = ["relay_registry"]


class _RelayCollector(Collector):
    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def collect(self) -> Iterable:
        relay, counts = self._relay, self._relay.counts
        yield GaugeMetricFamily(
            "agora_relay_master_linked",
            "1 while the master has accepted the relay's stream (agents are taken), else 0.",
            value=1.0 if relay.connected.is_set() else 0.0,
        )
        yield GaugeMetricFamily(
            "agora_relay_agents", "Agents' streams the relay carries now.", value=relay.carried
        )
        yield GaugeMetricFamily(
            "agora_relay_queued_up",
            "Agents' messages waiting to be sent to the master.",
            value=relay.queued_up(),
        )
        for name, help_text, value in (
            ("agora_relay_master_links", "Times the master accepted the relay's stream.",
             counts.links),
            ("agora_relay_messages_up", "Agents' messages carried to the master.",
             counts.messages_up),
            ("agora_relay_batches_up", "Stream messages sent to the master (each a batch).",
             counts.batches_up),
            ("agora_relay_messages_down", "The master's messages carried to agents.",
             counts.messages_down),
            ("agora_relay_batches_down", "Stream messages received from the master.",
             counts.batches_down),
        ):  # fmt: skip
            yield CounterMetricFamily(name, help_text, value=value)


def relay_registry(relay: Relay) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(_RelayCollector(relay))
    return registry
