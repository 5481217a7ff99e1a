"""Which tasks the driver still has to ask the master about (frameworks/sdk/pending.py)."""

from __future__ import annotations

from agora.frameworks.sdk.pending import PendingAnswers, next_ask_delay


def test_launches_in_flight_are_asked_about_after_a_resubscription_until_answered():
    p = PendingAnswers()
    p.launched([("t1", "a1"), ("t2", "a1"), ("t3", "a2")])
    p.heard("t1")  # its first update came: the master knows it
    assert p.to_ask() == []  # nothing to ask while the subscription that launched them lives
    p.resubscribed()
    assert sorted(p.to_ask()) == [("t2", "a1"), ("t3", "a2")]
    p.heard("t2")
    assert p.to_ask() == [("t3", "a2")]
    p.heard("t3")
    assert p.to_ask() == [] and p.in_flight == {}


def test_a_refused_launch_is_not_asked_about_and_explicit_asks_reset_the_backoff():
    p = PendingAnswers()
    p.launched([("t1", "a1")])
    p.not_launched(["t1"])
    p.resubscribed()
    assert p.to_ask() == []
    p.ask([("t9", "a3")])
    p.rounds = 3
    p.ask([("t9", "a3")])  # asked again: not new, the backoff goes on
    assert p.rounds == 3
    p.ask([("t10", "a3")])  # a new task: ask it soon
    assert p.rounds == 0


def test_asking_again_backs_off_to_eight_seconds():
    assert [next_ask_delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]
