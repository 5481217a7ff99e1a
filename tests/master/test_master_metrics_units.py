"""BulkHistogram: many equal observations in one call scrape exactly as prometheus_client's own
Histogram fed them one at a time (buckets, count and sum), boundaries included."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from agora.master.metrics import OFFER_LATENCY_BUCKETS, BulkHistogram


def test_bulk_observations_scrape_as_the_same_observations_made_one_by_one():
    name, doc = "agora_test_offer_latency_seconds", "Offer latency."
    ours, reference = CollectorRegistry(), CollectorRegistry()
    bulk = BulkHistogram(name, doc, OFFER_LATENCY_BUCKETS, ours)
    single = Histogram(name, doc, buckets=OFFER_LATENCY_BUCKETS, registry=reference)
    # On a boundary (le is inclusive), between boundaries, zero, and past the last one.
    for value, count in ((0.001, 10_000), (0.0007, 3), (0.0, 2), (0.25, 1), (7.5, 4)):
        bulk.observe(value, count)
        for _ in range(count):
            single.observe(value)

    def samples(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        return sorted(line for line in text.splitlines() if not line.startswith("#"))

    def split(lines: list[str]) -> tuple[list[str], float]:
        """The bucket and count lines, and the sum (added in another order: not bit-equal)."""
        (total,) = [float(line.split()[1]) for line in lines if line.startswith(f"{name}_sum")]
        return [line for line in lines if "_sum" not in line and "_created" not in line], total

    ours_lines, ours_sum = split(samples(ours))
    reference_lines, reference_sum = split(samples(reference))
    assert ours_lines == reference_lines
    assert ours_sum == pytest.approx(reference_sum)
    assert f'{name}_bucket{{le="0.001"}} 10005.0' in ours_lines
    assert f"{name}_count 10010.0" in ours_lines
