"""Timing what a framework sees, with time.monotonic() inside the framework's process.

One Recorder is shared by every load framework of a process, so "resources of agent X became
free" seen by one framework pairs with the next offer for X seen by any of them (DRF may hand
the freed resources to another framework). The figures (milliseconds):

- task_end_to_offer: a terminal UPDATE for a task on agent X received -> the next OFFERS event
  with an offer for X received.
- task_end_agent_to_offer: the same offer, timed from the agent's own timestamp of the terminal
  update (wall clock, same host): adds the agent -> master -> framework hop. When the offer is
  read before the update (two streams race), task_end_to_offer counts 0 ms (the offer was there
  first) and the case is counted as counts["offer_before_update"].
- decline_to_offer: Decline(refuse_seconds=0) of an offer for X issued -> next offer for X.
- subscribe_to_first_offer: SUBSCRIBED received -> the framework's first OFFERS event.
- join_to_offer: an agent's Register sent (recorded with `agent_joined`) -> first offer for it.
- accept_to_running: Accept (LAUNCH) issued -> that task's TASK_RUNNING update received.
- accept_to_starting: the same, to its (first) TASK_STARTING: the part before the agent
  launches the command.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agora.common.task_states import TERMINAL_STATES
from agora.v1 import common_pb2

METRICS = (
    "task_end_to_offer",
    "task_end_agent_to_offer",
    "decline_to_offer",
    "subscribe_to_first_offer",
    "join_to_offer",
    "accept_to_running",
    "accept_to_starting",
)


@dataclass(frozen=True)
class Sample:
    metric: str
    ms: float
    at: float  # monotonic time the sample completed
    framework: str
    agent_id: str


class Recorder:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.samples: list[Sample] = []
        self.counts: Counter[str] = Counter()
        # When recording is off (warm-up, drain) events still update the state, but no
        # samples are kept.
        self.recording = True
        self._freed: dict[str, tuple[float, float]] = {}  # agent -> (monotonic, agent wall)
        self._declined: dict[str, float] = {}
        self._joined: dict[str, float] = {}
        self._subscribed: dict[str, float] = {}
        # When each framework last subscribed, and when its latest OFFERS event arrived: a
        # whole round of offers (sent in several events) took the difference.
        self.subscribed_at: dict[str, float] = {}
        self.last_offers_at: dict[str, float] = {}
        self._accepted: dict[str, float] = {}  # task id -> Accept issued
        self._starting: set[str] = set()  # tasks whose STARTING was timed (resends are not)
        self.first_offer: dict[str, float] = {}  # agent -> first offer seen for it
        self._last_offer_wall: dict[str, float] = {}  # agent -> wall time of its last offer
        self.finished_at: list[float] = []  # terminal updates of launched tasks (throughput)
        self.running_at: list[float] = []

    def _add(
        self,
        metric: str,
        seconds: float,
        at: float,
        framework: str,
        agent: str,
        always: bool = False,
    ) -> None:
        if self.recording or always:
            self.samples.append(Sample(metric, seconds * 1000.0, at, framework, agent))

    # events -----------------------------------------------------------------------------

    def subscribed(self, framework: str) -> None:
        self._subscribed[framework] = self.subscribed_at[framework] = self.clock()

    def offers(self, framework: str, offers: Iterable[common_pb2.Offer]) -> None:
        now = self.clock()
        wall = self.wall()
        self.counts["offer_events"] += 1
        self.last_offers_at[framework] = now
        subscribed = self._subscribed.pop(framework, None)
        if subscribed is not None:
            self._add("subscribe_to_first_offer", now - subscribed, now, framework, "", always=True)
        for offer in offers:
            agent = offer.agent_id
            self.counts["offers"] += 1
            self.first_offer.setdefault(agent, now)
            self._last_offer_wall[agent] = wall
            freed = self._freed.pop(agent, None)
            if freed is not None:
                self._add("task_end_to_offer", now - freed[0], now, framework, agent)
                if freed[1] > 0:
                    self._add("task_end_agent_to_offer", wall - freed[1], now, framework, agent)
            declined = self._declined.pop(agent, None)
            if declined is not None:
                self._add("decline_to_offer", now - declined, now, framework, agent)
            joined = self._joined.pop(agent, None)
            if joined is not None:
                self._add("join_to_offer", now - joined, now, framework, agent)

    def update(self, framework: str, status: common_pb2.TaskStatus) -> None:
        now = self.clock()
        self.counts["updates"] += 1
        if status.state == common_pb2.TASK_STARTING:
            accepted = self._accepted.get(status.task_id)
            if accepted is not None and status.task_id not in self._starting:
                self._starting.add(status.task_id)
                self._add("accept_to_starting", now - accepted, now, framework, status.agent_id)
        elif status.state == common_pb2.TASK_RUNNING:
            self._starting.discard(status.task_id)
            accepted = self._accepted.pop(status.task_id, None)
            if accepted is not None:
                self.running_at.append(now)
                self._add("accept_to_running", now - accepted, now, framework, status.agent_id)
        elif status.state in TERMINAL_STATES and status.uuid:  # a real end, not a reconciliation
            self._accepted.pop(status.task_id, None)
            self._starting.discard(status.task_id)
            self.counts["terminal"] += 1
            self.finished_at.append(now)
            agent = status.agent_id
            offered = self._last_offer_wall.get(agent, 0.0)
            if status.timestamp and offered >= status.timestamp and agent not in self._freed:
                # The offer of the freed resources overtook this update (they travel on two
                # streams, often to two frameworks): the offer was here before we knew the
                # task had ended, so it counts as 0 ms, and as its agent-stamped time. Counted,
                # so the summary can say how often.
                self.counts["offer_before_update"] += 1
                self._add("task_end_to_offer", 0.0, now, "", agent)
                self._add("task_end_agent_to_offer", offered - status.timestamp, now, "", agent)
                return
            # The earliest unmatched end counts: that is when X first had resources free.
            self._freed.setdefault(agent, (now, status.timestamp))

    def accepted(self, task_ids: Iterable[str]) -> None:
        """Call as one Accept (LAUNCH) of these tasks is issued."""
        now = self.clock()
        self.counts["accepts"] += 1
        for task_id in task_ids:
            self._accepted[task_id] = now
            self.counts["launched"] += 1

    def declined(self, agent_id: str) -> None:
        """Call just before Decline(refuse_seconds=0) of an offer for `agent_id`."""
        self._declined.setdefault(agent_id, self.clock())
        self.counts["probe_declines"] += 1

    def agent_joined(self, agent_id: str, register_sent_at: float) -> None:
        """An agent (in this process) sent Register at `register_sent_at` (monotonic)."""
        first = self.first_offer.get(agent_id)
        if first is not None and first >= register_sent_at:
            # The offer beat the news of the registration to us.
            self._add("join_to_offer", first - register_sent_at, first, "", agent_id)
        else:
            self._joined[agent_id] = register_sent_at

    def values(self, metric: str) -> list[float]:
        return [s.ms for s in self.samples if s.metric == metric]
