"""The offer path, whole: what wakes a cycle, the batching window, the cycle, offers built and
sent, offers taken back (declined, rescinded, timed out).

    change that frees resources (a task ends, a decline, an agent joins, a framework subscribes)
      -> wake(agent_id)                     remembers which agents changed and since when
      -> run(): waits for a wake, batches    (--allocation-batch), sweeps every agent each
         changes into one cycle              --allocation-interval and at filter expiries
      -> allocate_in_slices(agent_ids)       1,000 agents at a time, the loop free between
      -> allocate(agent_ids)                 the allocator (pure DRF) grants; each grant becomes
                                             an Offer, written from its agent's template into
                                             OFFERS events of at most 500 per framework
    framework declines -> decline()          resources back with the decline filter -> wake
    offer outlives --offer-timeout, agent or framework leaves -> rescind() -> wake

Optimistic mode (--offer-mode optimistic, allocator/optimistic.py): offers hold nothing and
several frameworks are offered the same resources; an Accept commits through take() only if
its resources are still free, and the offers it leaves unsatisfiable are rescinded at once.
A hold (holds.py) that is met arrives as exclusive offers, then a HOLD event naming them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import structlog

from agora.common import EMPTY, Resources, new_id
from agora.master.allocation_timing import AllocationTiming
from agora.master.allocator import AllocatorProtocol
from agora.master.allocator.optimistic import beyond
from agora.master.caller import framework_for_call
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.ledger import Ledger
from agora.master.offers import TAKEN, LaunchPlan, check_offers, refuse_seconds, shortfall
from agora.master.registry import Agent, Offer, OfferTemplate, Registry
from agora.v1 import common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["AGENTS_PER_SLICE", "OFFERS_PER_EVENT", "OfferCycle", "offer_template", "write_offer"]

Event = scheduler_pb2.Event

# Offers per OFFERS event: a framework starts on the first while the rest are made and sent.
OFFERS_PER_EVENT = 500
# Agents per slice of a large cycle (allocate_in_slices), and in its first slice.
AGENTS_PER_SLICE = 1000
FIRST_SLICE = 250


def offer_template(agent: Agent) -> OfferTemplate:
    """The agent's offer template, made now if its registration has none yet (AgentBook makes
    it at registration, so that a large first round of offers finds every one made)."""
    template = agent.offer_template
    if template is None or template.info is not agent.info:
        info = agent.info
        template = agent.offer_template = OfferTemplate(
            info=info,
            agent_part=common_pb2.Offer(
                agent_id=info.agent_id,
                hostname=info.hostname,
                attributes=info.attributes,
                agent_address=info.address,
            ).SerializeToString(),
            total_part=common_pb2.Offer(resources=agent.total.to_proto()).SerializeToString(),
        )
    return template


def write_offer(target: common_pb2.Offer, offer: Offer, agent: Agent) -> None:
    """Fills `target` (a new Offer in an event) with `offer`, from its agent's template."""
    template = offer_template(agent)
    target.MergeFromString(template.agent_part)
    if offer.resources == agent.total:
        target.MergeFromString(template.total_part)
    else:
        target.resources.extend(offer.resources.to_proto())
    target.offer_id = offer.offer_id
    target.framework_id = offer.framework_id
    if offer.revocable:
        target.revocable = True


# allocate_if_quiet allocates at once over at most this many changed agents (an agent's
# message changes its own; a few more when a framework declined meanwhile).
INLINE_MAX_AGENTS = 8


class OfferCycle:
    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        allocator: AllocatorProtocol,
        ledger: Ledger,
        clock: Clock,
        counts: MasterCounters,
    ) -> None:
        self.config, self.reg, self.allocator = config, reg, allocator
        self.ledger, self.clock, self.counts = ledger, clock, counts
        self.wanted = asyncio.Event()
        # Agents whose free resources changed since the last cycle, which is all an event-driven
        # cycle needs to look at; None: every agent (a framework-level change, such as a
        # subscription or a revive, can make any agent offerable).
        self._changed: set[str] | None = set()
        # When each agent's resources (or, with the key None, everyone's) last became free
        # and have not been looked at by a cycle since: the start of the offer latency.
        self._freed_at: dict[str | None, float] = {}
        # Seconds each cycle took, its slices' own work (Master sets it to its metric).
        self.observe_cycle: Callable[[float], None] = lambda seconds: None
        self._cycle_seconds = 0.0
        # True while a cycle runs (a large one yields between its slices): the tick loop
        # puts a full garbage collection off meanwhile (master/heap.py).
        self.cycling = False
        # The event-driven loop's timing while it runs (allocate_if_quiet shares it), and no
        # inline cycle before this time (one failed).
        self._timing: AllocationTiming | None = None
        self._inline_after = -math.inf

    # --- waking --------------------------------------------------------------------------

    def wake(self, agent_id: str | None = None) -> None:
        """Asks for a cycle over `agent_id` (a change on that agent only), or over every agent
        when None."""
        if agent_id is None:
            self._changed = None
        elif self._changed is not None:
            self._changed.add(agent_id)
        self._freed_at.setdefault(agent_id, self.clock.now())
        self.wanted.set()

    def take_changed(self) -> list[str] | None:
        """The agents to allocate over now (None: all), resetting the set. All, too, when a
        framework's offers stopped covering what it wants: any agent may be for it."""
        changed, self._changed = self._changed, set()
        if self.allocator.take_reopened():
            return None
        return None if changed is None else list(changed)

    def allocate_if_quiet(self) -> int:
        """After a message from an agent was handled (event mode): if it changed a few agents
        and no cycle ran within the batch window, allocates over them here and now. Waking
        the loop's task instead costs the offer two more turns of the event loop, a tenth of
        a 1 ms offer latency. Everything else (a sweep or a filter's expiry due, a framework
        that may want any agent, changes that come while the window runs) is left to the
        loop, which batches as before: of tasks that end together on several agents, the
        first is offered at once and the others in one cycle at most a window later. Returns
        how many offers it sent."""
        timing, changed = self._timing, self._changed
        if timing is None or self.cycling or not changed or len(changed) > INLINE_MAX_AGENTS:
            return 0
        now = self.clock.now()
        if timing.batch_delay(now) > 0 or now >= timing.next_sweep or now < self._inline_after:
            return 0
        expiry = self.allocator.next_wakeup()
        if expiry is not None and expiry <= now:
            return 0  # filters expire: over as many agents as they were on, in slices
        with self._measured():
            try:
                agents = self.take_changed()
                if agents is None:  # a framework's want reopened: every agent, the loop's
                    self._changed = None
                    return 0
                self.wanted.clear()  # the loop's task, woken already, finds nothing to do
                return self._timed(agents)
            except Exception:
                log.exception("allocation failed")
                # As the loop after a failed cycle: not again for an interval (the loop's
                # next cycles go on; a failure must not repeat with every agent's message).
                self._inline_after = now + self.config.allocation_interval_seconds
                return 0
            finally:
                timing.cycle_ended(self.clock.now())

    def wake_if_reopened(self) -> None:
        """A cycle over every agent if a framework now wants more than its offers hold."""
        if self.allocator.take_reopened():
            self.wake()

    def answered(self, offer: Offer) -> None:
        """The offer ended: what it held no longer covers what its framework wants."""
        if not offer.revocable:
            self.allocator.answered(offer.framework_id, offer.resources)

    # --- the cycle -----------------------------------------------------------------------

    def allocate(self, agent_ids: list[str] | None = None) -> int:
        """One allocation cycle over `agent_ids` (None: every agent): grants become offers,
        sent in OFFERS events of at most OFFERS_PER_EVENT. Returns how many were sent."""
        now = self.clock.now()
        # framework_id -> the event being filled, and its offers
        events: dict[str, tuple[scheduler_pb2.Event, Any]] = {}
        freed, sent = self._freed_at, 0
        everyone = freed.get(None)
        met: dict[str, scheduler_pb2.Event] = {}  # hold_id -> its HOLD event, offers in it
        waits: dict[float, int] = {}  # offer latency (seconds) -> offers that waited so long
        for grant in self.allocator.allocate(now, agent_ids):
            framework = self.reg.frameworks.get(grant.framework_id)
            agent = self.reg.agents.get(grant.agent_id)
            if framework is None or not framework.connected or agent is None or not agent.connected:
                if grant.revocable:
                    self.allocator.withdraw_revocable(grant.framework_id, grant.agent_id)
                    continue
                if grant.exclusive:
                    self.ledger.recover(grant.framework_id, grant.agent_id, grant.resources)
                else:
                    self.allocator.withdraw(grant.framework_id, grant.agent_id, grant.resources)
                # Never sent: it covers nothing the framework wants.
                self.allocator.answered(grant.framework_id, grant.resources)
                continue
            offer = Offer(
                new_id("offer"),
                grant.framework_id,
                grant.agent_id,
                grant.resources,
                created_at=now,
                exclusive=grant.exclusive,
                revocable=grant.revocable,
            )
            self.reg.add_offer(offer)
            if grant.hold_id:  # a met hold's offers travel in its HOLD event, all together
                event = met.get(grant.hold_id)
                if event is None:
                    event = met[grant.hold_id] = _hold_met_event(grant.hold_id)
                write_offer(event.hold.offers.add(), offer, agent)
                sent += 1
                continue
            batch = events.get(offer.framework_id)
            if batch is None:
                event = Event()
                batch = events[offer.framework_id] = (event, event.offers.offers)
            offers = batch[1]  # the repeated field, looked up once per event
            write_offer(offers.add(), offer, agent)
            if len(offers) >= OFFERS_PER_EVENT:
                framework.send(events.pop(offer.framework_id)[0])
            # Offer latency: since the agent's resources (or everyone's) became free.
            since = freed.get(offer.agent_id, everyone)
            if since is not None:
                wait = max(0.0, now - since)
                waits[wait] = waits.get(wait, 0) + 1
            sent += 1
        for framework_id, (event, _) in events.items():
            self.reg.frameworks[framework_id].send(event)
        for wait, count in waits.items():
            self.counts.observe_offer_latency(wait, count)
        for hold_event in met.values():
            self._hold_met(hold_event)
        self._check_touched()
        self.counts.offers_sent += sent
        # The free times this cycle looked at are spent (offered or not: what a filter holds
        # back is not latency).
        if agent_ids is None:
            freed.clear()
        else:
            for agent_id in agent_ids:
                freed.pop(agent_id, None)
        log.debug("cycle", offers=sent, agents="all" if agent_ids is None else len(agent_ids))
        return sent

    async def allocate_in_slices(self, agent_ids: list[str] | None = None) -> int:
        """allocate(agent_ids), AGENTS_PER_SLICE agents at a time, letting the loop send each
        slice's offers (and serve calls) before the next is made: with 10,000 agents the first
        offers leave within milliseconds instead of after the whole cycle. Each slice is a
        complete cycle (DRF re-sorts after every grant in any case), so the result is the one
        cycle's; an agent that left meanwhile is skipped, one that came will be woken for."""
        ids = list(self.reg.agents) if agent_ids is None else agent_ids
        if len(ids) <= AGENTS_PER_SLICE:
            return self._timed(agent_ids)
        sent = 0
        # The first slice is small: its offers are what a framework waits for first.
        bounds = [0, *range(FIRST_SLICE, len(ids), AGENTS_PER_SLICE), len(ids)]
        for start, end in itertools.pairwise(bounds):
            if start:
                await asyncio.sleep(0)
            sent += self._timed(ids[start:end])
        if agent_ids is None:
            self._freed_at.pop(None, None)  # the sweep looked at everyone
        return sent

    # --- offers taken back ---------------------------------------------------------------

    def rescind(self, offer: Offer, why: str, *, notify: bool = True, recover: bool = True) -> None:
        """Takes back an outstanding offer: its resources return to the allocator (unless
        `recover` is False: the agent is going) and its framework is told (unless `notify` is
        False: the framework's stream is going)."""
        self.reg.drop_offer(offer.offer_id, why)
        self.answered(offer)
        self.counts.offers_rescinded += 1
        if recover:
            self.ledger.release_offer(offer)
        framework = self.reg.frameworks.get(offer.framework_id)
        if notify and framework is not None:
            framework.send(Event(rescind=Event.Rescind(offer_id=offer.offer_id)))
        log.debug(
            "offer rescinded",
            offer_id=offer.offer_id,
            framework_id=offer.framework_id,
            agent_id=offer.agent_id,
            why=why,
        )
        self.wake(offer.agent_id)

    def expire(self) -> None:
        """Rescinds the offers held past --offer-timeout."""
        timeout = self.config.offer_timeout_seconds
        if timeout is None:
            return
        now = self.clock.now()
        for offer in list(self.reg.offers.values()):
            if now - offer.created_at >= timeout:
                self.counts.offers_timed_out += 1
                self.rescind(offer, f"offer timed out after {timeout:g} s")

    def decline(self, request: scheduler_pb2.DeclineRequest) -> None:
        framework = framework_for_call(self.reg, request.framework_id, request.stream_id)
        refuse = refuse_seconds(request.filters, self.config.default_refuse_seconds)
        # A decline racing a rescind is normal: skip offers that are already gone.
        live = [i for i in request.offer_ids if i not in self.reg.gone_offers]
        if not request.offer_ids:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "no offer_ids given")
        if not live:
            return
        offers = check_offers(framework.framework_id, live, self.reg.offers, self.reg.gone_offers)
        self.counts.offers_declined += len(offers)
        # One filter per agent, refusing the sum of the offers declined there: a filter per
        # offer would let the next refuse only its own part, and the rest come straight back.
        refused: dict[str, Resources] = {}
        for offer in offers:
            self.reg.drop_offer(offer.offer_id, "declined")
            self.answered(offer)
            self.ledger.release_offer(offer)
            if offer.revocable:  # refused apart: no filter of its ordinary offers
                if refuse:
                    self.ledger.refuse_revocable(framework.framework_id, offer.agent_id, refuse)
                self.wake(offer.agent_id)
                continue
            had = refused.get(offer.agent_id)
            refused[offer.agent_id] = offer.resources if had is None else had + offer.resources
        for agent_id, resources in refused.items():
            if refuse:
                self.ledger.refuse(framework.framework_id, agent_id, refuse, resources)
            self.wake(agent_id)
        log.debug(
            "offers declined",
            framework_id=framework.framework_id,
            offers=[o.offer_id for o in offers],
            refuse_seconds=refuse,
        )

    # --- optimistic commits and holds ------------------------------------------------------

    def take(self, framework_id: str, plan: LaunchPlan, offers: list[Offer]) -> None:
        """Commits an Accept whose offers include optimistic ones: what its tasks use must
        still be free (an exclusive offer's resources count as free to its framework), and the
        fairness rule (allocator/optimistic.py) must not give a framework below its fair share
        priority on it. Raises CallError(ABORTED) and changes nothing otherwise; on success the
        offers are used, and the offers on the agent left unsatisfiable are rescinded."""
        agent_id = plan.agent_id
        needed = plan.offered - plan.unused
        held = EMPTY
        for offer in offers:
            if offer.exclusive:
                held = held + offer.resources
        available = self.allocator.free(agent_id) + held
        names = ", ".join(o.offer_id for o in offers)
        if not available.contains(needed):
            # Stale: take them back now, so that a fresh offer of what is left follows.
            self._rescind_taken(offers, available)
            raise CallError(
                grpc.StatusCode.ABORTED,
                f"offer {names} on agent {agent_id}: the tasks need {needed} but only "
                f"{available} is still free; another framework took "
                f"{shortfall(available, needed)} first. Nothing was launched: re-plan with "
                "fresh offers",
                Reason.OFFER_CONFLICT,
            )
        now = self.clock.now()
        extra = beyond(needed, held) if held else needed
        quota = self.allocator.quota_room(framework_id, extra)
        if quota is not None:
            raise CallError(
                grpc.StatusCode.ABORTED,
                f"offer {names} on agent {agent_id}: {quota}. Nothing was launched: "
                "re-plan with fresh offers",
                Reason.OFFER_CONFLICT,
            )
        grace = self.config.optimistic_grace_seconds
        rival = self.allocator.priority_rival(framework_id, agent_id, extra, now, grace)
        if rival is not None:
            wait = max(0.0, rival.offered_at + grace - now)
            raise CallError(
                grpc.StatusCode.ABORTED,
                f"offer {names} on agent {agent_id}: {extra} of it is also offered to a "
                f"framework below its fair share ({rival.share:.3f} < {rival.fair_share:.3f}), "
                "and this framework would be above its own; it has priority for "
                f"{grace:g} s after its offer. Nothing was launched: retry in {wait:.2f} s or "
                "use other offers",
                Reason.BELOW_SHARE_PRIORITY,
                metadata={"retry_after_seconds": f"{wait:.3f}"},
            )
        for offer in offers:
            self.reg.drop_offer(offer.offer_id, "already accepted")
            self.answered(offer)
            if not offer.exclusive:
                self.allocator.withdraw(framework_id, agent_id, offer.resources)
        if held:
            self.ledger.recover(framework_id, agent_id, held)
        self.allocator.commit(framework_id, agent_id, needed)
        if plan.unused and plan.refuse_seconds:
            self.ledger.refuse(framework_id, agent_id, plan.refuse_seconds, plan.unused)
        self.rescind_unsatisfiable(agent_id)

    def rescind_lent(self, agent_id: str) -> None:
        """Ordinary tasks were launched on the agent: its revocable offers may lend room they
        now use. Rescinded (lent again, as much as is left, by the next cycle)."""
        for offer in self.reg.offers_of_agent(agent_id):
            if offer.revocable:
                self.rescind(offer, "the room it lent was taken by ordinary tasks")

    def rescind_unsatisfiable(self, agent_id: str) -> None:
        """Rescinds the optimistic offers on `agent_id` that ask for more than is free now
        (an Accept or a hold took part of it), so their frameworks re-plan at once rather
        than on a failed Accept; what is left is offered again (wake)."""
        free = self.allocator.free(agent_id)
        by_framework: dict[str, list[Offer]] = {}
        for offer in self.reg.offers_of_agent(agent_id):
            if not offer.exclusive and not offer.revocable:  # revocable: lent, not free
                by_framework.setdefault(offer.framework_id, []).append(offer)
        for stale in by_framework.values():
            total = EMPTY
            for offer in stale:
                total = total + offer.resources
            # A framework may merge its offers on one agent: all of them must still fit.
            if not free.contains(total):
                self._rescind_taken(stale, free)

    def _rescind_taken(self, offers: list[Offer], left: Resources) -> None:
        """Rescinds offers whose resources another Accept (or a hold) took: an Accept that
        names one later fails with OFFER_CONFLICT (offers.TAKEN), not as a stale offer."""
        for offer in offers:
            if offer.offer_id in self.reg.offers:
                self.counts.offers_conflicted += 1
                self.rescind(offer, f"{TAKEN}; {left} is left on the agent")

    def _check_touched(self) -> None:
        """After a cycle: holds that took free resources may have left optimistic offers on
        those agents unsatisfiable."""
        touched = self.allocator.hold_touched
        while touched:
            self.rescind_unsatisfiable(touched.pop())

    def end_holds(self, framework_id: str) -> None:
        """The framework's holds end with its subscription (no event: it is not listening);
        what they collected is free again."""
        for hold in self.allocator.holds_of(framework_id):
            self.allocator.release_hold(hold.hold_id)
            for agent_id in hold.taken:
                self.wake(agent_id)

    def _hold_met(self, event: scheduler_pb2.Event) -> None:
        hold = event.hold
        framework_id = hold.offers[0].framework_id
        hold.message = f"hold met: {len(hold.offers)} offers"
        self.counts.holds_met += 1
        self.reg.frameworks[framework_id].send(event)
        log.debug(
            "hold met", hold_id=hold.hold_id, framework_id=framework_id, offers=len(hold.offers)
        )

    # --- the loops -----------------------------------------------------------------------

    async def run(self) -> None:
        """Runs cycles for ever as --allocation-mode says."""
        if self.config.allocation_mode == "interval":
            await self._run_periodic()
        else:
            await self._run_event_driven()

    def _timed(self, agent_ids: list[str] | None) -> int:
        """allocate(), its time added to the cycle's (the loop's work between slices is not)."""
        started = time.perf_counter()
        try:
            return self.allocate(agent_ids)
        finally:
            self._cycle_seconds += time.perf_counter() - started

    @contextlib.contextmanager
    def _measured(self) -> Iterator[None]:
        """A cycle under way (`cycling`), its time observed when it ends."""
        self._cycle_seconds = 0.0
        self.cycling = True
        try:
            yield
        finally:
            self.cycling = False
            self.observe_cycle(self._cycle_seconds)

    async def _cycle(self, agent_ids: list[str] | None) -> bool:
        """One timed cycle; False if it failed (a bug in one cycle must not stop offers)."""
        with self._measured():
            try:
                await self.allocate_in_slices(agent_ids)
                return True
            except Exception:
                log.exception("allocation failed")
                return False

    async def _run_event_driven(self) -> None:
        """Allocates soon after any change (batched), at the allocator's next filter expiry,
        and every allocation_interval_seconds as a safety net: when and over which agents is
        AllocationTiming's to say, on the master's clock; this loop only waits."""
        config, clock = self.config, self.clock
        timing = self._timing = AllocationTiming(
            config.allocation_batch_seconds, config.allocation_interval_seconds, clock.now()
        )
        try:
            while True:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that races with the event, and the loop would never stop.
                try:
                    wait = timing.wait(clock.now(), self.allocator.next_wakeup())
                    async with asyncio.timeout(wait):
                        await self.wanted.wait()
                except TimeoutError:
                    pass
                else:
                    # One pass of the loop at least, so changes made in the same pass join in.
                    await asyncio.sleep(timing.batch_delay(clock.now()))
                    if not self.wanted.is_set():
                        continue  # allocate_if_quiet took the change meanwhile
                self.wanted.clear()
                now = clock.now()
                changed = self.take_changed()
                agents = timing.scope(now, changed, self.allocator.expire_filters(now))
                if not await self._cycle(agents):
                    await asyncio.sleep(config.allocation_interval_seconds)
                timing.cycle_ended(clock.now())
        finally:
            self._timing = None

    async def _run_periodic(self) -> None:
        """Mesos' default: one cycle every allocation_interval_seconds on a fixed timer, however
        many changes happened meanwhile (the experiments compare this with event-driven)."""
        period, clock = self.config.allocation_interval_seconds, self.clock
        next_cycle = clock.now() + period
        while True:
            await asyncio.sleep(max(0.0, next_cycle - clock.now()))
            # A cycle that overran its period is not followed by a burst of catch-up cycles.
            next_cycle = max(next_cycle + period, clock.now())
            self.wanted.clear()
            self.take_changed()
            await self._cycle(None)


def _hold_met_event(hold_id: str) -> scheduler_pb2.Event:
    return Event(hold=Event.HoldUpdate(hold_id=hold_id, state=scheduler_pb2.HOLD_MET))
