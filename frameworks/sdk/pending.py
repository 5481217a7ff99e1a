"""Which tasks' fate a framework has still to learn, and when to ask the master again. Pure.

A launch can die with the master that took it: the framework believes the task launched, a
new master (or the same one, restarted) has never heard of it, and no update will ever come.
So the driver keeps, per task, whether it is *in flight* (launched, nothing heard since) or
*asked about* (explicit reconciliation sent, no answer yet). After every re-subscription the
in-flight tasks are asked about too, and the driver asks again with backoff until each has an
answer, as Mesos tells schedulers to do. The master answers a task of an agent that has not
re-registered only once it does (or is removed), so the asking goes on across the agents'
return; a task nobody has is answered TASK_UNKNOWN, and the framework launches it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PendingAnswers", "next_ask_delay"]

FIRST_ASK_DELAY = 0.5
MAX_ASK_DELAY = 8.0


def next_ask_delay(asks_so_far: int) -> float:
    """Seconds before asking again, after `asks_so_far` unanswered rounds: 0.5, 1, 2, 4, 8, 8..."""
    return min(MAX_ASK_DELAY, FIRST_ASK_DELAY * 2 ** max(0, asks_so_far - 1))


@dataclass
class PendingAnswers:
    in_flight: dict[str, str] = field(default_factory=dict)  # task id -> agent id
    asked: dict[str, str] = field(default_factory=dict)
    rounds: int = 0  # unanswered rounds since the set last grew

    def launched(self, tasks: list[tuple[str, str]]) -> None:
        self.in_flight.update(tasks)

    def not_launched(self, task_ids: list[str]) -> None:
        """The master refused the launch outright: nothing to ask about."""
        for task_id in task_ids:
            self.in_flight.pop(task_id, None)

    def ask(self, tasks: list[tuple[str, str]]) -> None:
        """Explicit reconciliation of `tasks`: ask until each is answered."""
        if any(task_id not in self.asked for task_id, _ in tasks):
            self.rounds = 0
        self.asked.update(tasks)

    def heard(self, task_id: str) -> None:
        self.in_flight.pop(task_id, None)
        self.asked.pop(task_id, None)

    def resubscribed(self) -> None:
        """A new subscription: a launch in flight may have died with the old one's master."""
        self.ask(list(self.in_flight.items()))

    def to_ask(self) -> list[tuple[str, str]]:
        return list(self.asked.items())
