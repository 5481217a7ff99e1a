"""Queue policies: one suite over every registered policy, then each policy's own order."""

from __future__ import annotations

import pytest

from agora.frameworks.batch.queue import DEFAULT_POLICY, POLICIES, QueuedJob, get_policy, order

A = QueuedJob("a", sequence=1, priority=0, duration_seconds=300)
B = QueuedJob("b", sequence=2, priority=5, duration_seconds=10)
C = QueuedJob("c", sequence=3, priority=5, duration_seconds=0)  # no declared duration
D = QueuedJob("d", sequence=4, priority=-1, duration_seconds=10)


def ids(jobs):
    return [j.job_id for j in jobs]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_orders_every_job_once_and_is_stable(policy):
    jobs = [D, C, B, A]
    ordered = order(jobs, policy)
    assert sorted(ids(ordered)) == ["a", "b", "c", "d"]
    assert order(list(reversed(jobs)), policy) == ordered  # input order does not matter


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_breaks_ties_by_submission(policy):
    twins = [QueuedJob("late", 9, 1, 5.0), QueuedJob("early", 2, 1, 5.0)]
    assert ids(order(twins, policy)) == ["early", "late"]


def test_fifo_is_submission_order_and_the_default():
    assert DEFAULT_POLICY == "fifo"
    assert ids(order([D, B, C, A])) == ["a", "b", "c", "d"]


def test_priority_highest_first_then_fifo():
    # priorities: a=0, b=5, c=5, d=-1 -> b and c (5; b came first), a (0), d (-1)
    assert ids(order([A, B, C, D], "priority")) == ["b", "c", "a", "d"]


def test_sjf_shortest_declared_first_unknown_last():
    # durations: a=300, b=10, c=unknown, d=10 -> b, d (10; b first), a (300), c (unknown)
    assert ids(order([A, B, C, D], "sjf")) == ["b", "d", "a", "c"]


def test_unknown_policy_names_the_choices():
    with pytest.raises(ValueError, match="unknown queue policy 'lifo'.*fifo, priority, sjf"):
        get_policy("lifo")
