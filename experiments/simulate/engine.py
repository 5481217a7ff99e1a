"""The simulation: the master's real allocator and the batch framework's real planner, on a
virtual clock, over a trace. No network, no processes, no threads.

What is real and what is modelled:

- real: `Allocator` (DRF sorters, decline filters, offer policies pessimistic and optimistic,
  minimum allocatable), `AllocationTiming` (when the event-driven master allocates and over
  which agents), the batch framework's queue order and placement (queue.py here);
- modelled, with the defaults of the real daemons: one message between master and framework
  takes `latency_seconds`; a framework decides a round of offers in `job_decision` per job it
  places plus `task_decision` per task (Omega's t_job and t_task), one round at a time; a
  task runs exactly its trace duration from the moment its Accept reaches the master. The
  frameworks act as the batch framework does: they decline what they cannot use with its
  filters (5 s while work waits, 60 s for offers with less cpus or mem than any waiting task,
  15 s when none waits), summed per agent as the master's
  Decline does; suppress offers when nothing waits; revive on every job that arrives (which
  clears their filters), and once more after a round during which work arrived; say what
  their queue waits for in total and the fewest cpus and mem a waiting task asks for
  (`sized_offers`, the master's Wants), so that the allocator offers them as many agents as
  cover it and none too small, and again when it differs from what the master counts (its
  count less what launched), as the batch framework's `Driver.want`. An optimistic
  Accept is judged as the master's OfferCycle.take judges it: a conflict if its offers were
  rescinded or its tasks no longer fit, BELOW_SHARE_PRIORITY if a framework below its fair
  share was offered the room within the grace period; a commit rescinds the other offers on
  the agent that no longer fit, wherever they are.
- preemption (`preemption_timeout`): the master's own decision (allocator/preemption.py's
  `plan`, over the allocator's `preemption_roles`, `preemption_free` and `preemption_room`),
  checked every `preemption_check_seconds` as the master's tick does, with its default budget
  of kills a minute. A role is starved while tasks of its wait and its dominant share is below
  its fair share; once the timeout has run, the plan stops tasks only if the first task in
  its queue's order fits no free room (fair-share preemption: no quota here, and the demand's
  priority is not passed on, so no preemption by priority within a role). A victim ends at
  once (the master's kill and the agent's report are not modelled), its resources go back,
  and its task waits again in its job's place, as the batch framework reruns a preempted
  instance. Not modelled: the offer timeout (60 s; a round at the defaults takes far less),
  quota.

Each role of the trace is one framework (its id is the role's name).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from agora.common import Resources
from agora.experiments.simulate.clock import VirtualClock
from agora.experiments.simulate.metrics import Recorder
from agora.experiments.simulate.queue import Placed, TraceQueue, scalars, shape_of
from agora.experiments.simulate.trace import Trace
from agora.frameworks.batch.queue import order
from agora.frameworks.batch.refusals import (
    DECLINE_REFUSE_SECONDS,
    IDLE_REFUSE_SECONDS,
    UNFIT_REFUSE_SECONDS,
)
from agora.master.allocation_timing import AllocationTiming
from agora.master.allocator import Allocator
from agora.master.allocator.drf import inverse_totals, scalar_vector, vector_resources
from agora.master.allocator.preemption import (
    Candidate,
    RoleState,
    fair_shares,
    plan,
    starvation,
)
from agora.master.allocator.quota import add_into
from agora.master.allocator.types import AllocatorConfig, OfferGrant
from agora.master.config import MasterConfig
from agora.v1 import common_pb2

__all__ = ["MODES", "SimConfig", "Simulation"]

# The offer modes side by side: (offer policy, allocation cadence).
MODES = {
    "pessimistic": ("pessimistic", "event"),  # Agora's default
    "optimistic": ("optimistic", "event"),
    "interval": ("pessimistic", "interval"),  # Mesos: one cycle per second on a timer
}


@dataclass(frozen=True)
class SimConfig:
    mode: str = "pessimistic"  # a key of MODES
    interval_seconds: float = 1.0  # interval mode's period; the event mode's full sweep
    batch_seconds: float = 0.002  # the event-driven master's batching window (its default)
    optimistic_fanout: int = 3  # optimistic mode: frameworks offered the same room (master's)
    optimistic_grace_seconds: float = 0.5  # a fair-share rival's priority (the master's)
    latency_seconds: float = 0.001  # one message, master <-> framework
    job_decision: float = 0.005  # seconds a framework thinks per job it places in a round
    task_decision: float = 0.0005  # and per task
    # Per role, a job decision time of its own (the swept one, on Omega's axes).
    role_job_decision: dict[str, float] = field(default_factory=dict)
    sample_seconds: float = 0.0  # fairness and utilisation samples (0: 200 over the trace)
    # Fair-share preemption after a role has been starved this long (the master's
    # --fair-share-preemption-timeout); None: off, as the master's default.
    preemption_timeout: float | None = None
    preemption_check_seconds: float = 1.0  # how often the master looks (its tick's check)
    max_preemptions_per_minute: int = MasterConfig.max_preemptions_per_minute
    # Frameworks say what they wait for (scheduler.proto's Wants, as the batch framework
    # does): offers sized by demand, none too small for every waiting task. False: every
    # agent with room is offered (Mesos' way).
    sized_offers: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of: {', '.join(MODES)}")
        if self.preemption_timeout is not None and not self.preemption_timeout >= 0:
            raise ValueError(f"preemption_timeout must be 0 or more, got {self.preemption_timeout}")
        if not self.preemption_check_seconds > 0:
            raise ValueError(
                f"preemption_check_seconds must be more than 0, got {self.preemption_check_seconds}"
            )


@dataclass
class _Offer:
    grant: OfferGrant
    offer_id: str
    rescinded: bool = False

    def proto(self) -> common_pb2.Offer:
        """The Offer the planner reads; made only for offers that may fit a waiting task."""
        grant = self.grant
        return common_pb2.Offer(
            offer_id=self.offer_id,
            framework_id=grant.framework_id,
            agent_id=grant.agent_id,
            hostname=grant.agent_id,
            resources=grant.resources.to_proto(),
        )


@dataclass
class _Running:
    """A task running on an agent (a group of tasks when preemption is off: it then needs no
    single victims)."""

    key: str
    fw: _Framework
    agent_id: str
    placed: Placed
    started: float
    alive: bool = True


class _Framework:
    """One role's framework: its queue, the offers in hand and whether it is deciding."""

    def __init__(self, role: str, job_decision: float) -> None:
        self.role = role
        self.queue = TraceQueue(role)
        self.job_decision = job_decision
        self.inbox: dict[str, _Offer] = {}
        self.deciding = False
        self.suppressed = True
        self.reviving = False
        self.arrivals = 0  # jobs arrived so far: work that came during a round revives after it
        self.planned: dict[str, int] = {}  # job -> tasks in Accepts not answered yet
        self.out: dict[str, _Offer] = {}  # its offers not answered yet (the master's view)
        self.out_vec: dict[str, int] = {}  # what they hold together (drf vector), kept as they go


class Simulation:
    def __init__(self, trace: Trace, config: SimConfig) -> None:
        self.trace, self.config = trace, config
        policy, self.cadence = MODES[config.mode]
        fanout = config.optimistic_fanout if policy == "optimistic" else 0
        self.alloc = Allocator(
            AllocatorConfig(
                offer_mode=policy,
                optimistic_fanout=fanout,
                default_refuse_seconds=DECLINE_REFUSE_SECONDS,
            )
        )
        self.clock = VirtualClock()
        cluster = trace.cluster
        self.total = scalars(cluster.agent)
        self.capacity = cluster.capacity
        self.recorder = Recorder(self.capacity, list(cluster.roles))
        self.frameworks: dict[str, _Framework] = {}
        for role, weight in cluster.roles.items():
            self.alloc.set_weight(role, weight)
            self.alloc.add_framework(role, role=role, suppressed=True)
            decision = config.role_job_decision.get(role, config.job_decision)
            self.frameworks[role] = _Framework(role, decision)
        self.agent_ids = [f"agent-{i:06d}" for i in range(cluster.agents)]
        for agent_id in self.agent_ids:
            self.alloc.add_agent(agent_id, self.total)
        self.timing = AllocationTiming(config.batch_seconds, config.interval_seconds, 0.0)
        self._changed: set[str] | None = set()
        self._cycle_due: float | None = None
        self._timer_due: float | None = None
        self._offer_ids = 0
        self._live: dict[str, dict[str, _Offer]] = {}  # agent -> its outstanding offers
        self.running_tasks = 0
        self._preempting = config.preemption_timeout is not None
        self._running: dict[str, _Running] = {}  # (with preemption) by key
        self._run_ids = 0
        self._starved_since: dict[str, float] = {}
        self._kills: deque[float] = deque()  # times of the last minute's preemptions

    # --- running -------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> Recorder:
        """Replays the trace; returns the recorder, read up to the trace's end."""
        seconds = self.trace.cluster.seconds
        for job in self.trace.jobs:
            self.clock.at(job.at, partial(self._arrive, job))
        step = self.config.sample_seconds or seconds / 200
        t = 0.0
        while t <= seconds:
            self.clock.at(t, self._sample)
            t += step
        if self.cadence == "interval":
            self.clock.at(self.config.interval_seconds, self._periodic)
        else:
            self._set_timer()
        if self._preempting:
            self.clock.at(self.config.preemption_check_seconds, self._preemption_tick)
        # Progress (and a chance to stop) at least every simulated minute.
        chunk = min(max(seconds / 50, 1.0), 60.0)
        t = 0.0
        while t < seconds:
            t = min(seconds, t + chunk)
            self.clock.run_until(t)
            if progress is not None:
                progress(t)
        self.recorder.advance(seconds)
        return self.recorder

    # --- the master's offer loop ------------------------------------------------------------

    def _change(self, agent_id: str | None) -> None:
        """Something freed resources (agent_id None: any agent may be offerable now)."""
        if self.cadence == "interval":
            return  # Mesos' timer ignores changes: the next tick sees them
        if agent_id is None:
            self._changed = None
        elif self._changed is not None:
            self._changed.add(agent_id)
        if self._cycle_due is None:
            now = self.clock.now
            self._cycle_due = now + self.timing.batch_delay(now)
            self.clock.at(self._cycle_due, self._cycle)

    def _cycle(self) -> None:
        self._cycle_due = None
        now = self.clock.now
        expired = self.alloc.expire_filters(now)
        changed, self._changed = self._changed, set()
        if self.alloc.take_reopened():
            changed = None  # as the master's take_changed: any agent may be for it
        scope = self.timing.scope(now, None if changed is None else sorted(changed), expired)
        self._allocate(scope)
        self.timing.cycle_ended(now)
        self._set_timer()

    def _set_timer(self) -> None:
        """The master's wait: the next sweep, or a decline filter's expiry if sooner."""
        now = self.clock.now
        due = now + self.timing.wait(now, self.alloc.next_wakeup())
        if self._timer_due is None or due < self._timer_due:
            self._timer_due = due
            self.clock.at(due, lambda: self._timer(due))

    def _timer(self, due: float) -> None:
        if self._timer_due != due:
            return  # superseded by an earlier one
        self._timer_due = None
        if self._cycle_due is None:  # else that cycle expires the filters and re-arms this
            self._cycle()

    def _periodic(self) -> None:
        self._allocate(None)
        self.clock.after(self.config.interval_seconds, self._periodic)

    def _allocate(self, scope: list[str] | None) -> None:
        now = self.clock.now
        started = time.process_time()
        grants = self.alloc.allocate(now, scope)
        self.recorder.allocate_cpu_seconds += time.process_time() - started
        self.recorder.cycles += 1
        if not grants:
            return
        self.recorder.offers += len(grants)
        by_framework: dict[str, list[_Offer]] = {}
        for grant in grants:
            by_framework.setdefault(grant.framework_id, []).append(self._offer(grant))
        arrive = now + self.config.latency_seconds
        for framework_id, offers in by_framework.items():
            fw = self.frameworks[framework_id]
            self.clock.at(arrive, partial(self._offers_reach, fw, offers))

    def _offer(self, grant: OfferGrant) -> _Offer:
        self._offer_ids += 1
        offer = _Offer(grant, f"o{self._offer_ids}")
        self._live.setdefault(grant.agent_id, {})[offer.offer_id] = offer
        fw = self.frameworks[grant.framework_id]
        fw.out[offer.offer_id] = offer
        add_into(fw.out_vec, scalar_vector(grant.resources))
        return offer

    # --- the frameworks ---------------------------------------------------------------------

    def _arrive(self, job) -> None:
        """A job reaches its framework, which revives (as the batch framework does on every
        submission: a revive also clears its decline filters, which may hide room the new
        job could use)."""
        fw = self.frameworks[job.role]
        self.recorder.arrived(job.job, job.role, job.tasks, self.clock.now)
        fw.queue.arrive(job)
        fw.arrivals += 1
        self._ask_revive(fw)
        if fw.inbox and not fw.deciding:
            self._decide(fw)

    def _ask_revive(self, fw: _Framework) -> None:
        if not fw.reviving:  # one revive on its way serves every arrival before it lands
            fw.reviving = True
            self.clock.after(self.config.latency_seconds, partial(self._revive, fw))

    def _revive(self, fw: _Framework) -> None:
        fw.reviving = False
        if fw.queue:
            fw.suppressed = False
            self.alloc.revive(fw.role)
            if self.config.sized_offers:
                self._tell_wants(fw)
            self._change(None)

    def _tell_wants(self, fw: _Framework) -> None:
        """The framework's want (its Revive's or a Demand's): what its queue waits for, told
        when it differs from the master's count, with its unanswered offers counted in."""
        wants = scalars(fw.queue.demand())
        cpus, mem = fw.queue.smallest()
        smallest = Resources.of(cpus=cpus, mem=mem)
        counted = self.alloc.wants_of(fw.role)
        if (
            counted is not None
            and counted[0] == scalar_vector(wants)
            and counted[2] == (scalar_vector(smallest) if smallest else {})
        ):
            return
        # Summed as offers come and go: at 100,000 agents thousands are out at a time, and a
        # revive comes with every job.
        self.alloc.set_wants(fw.role, wants, vector_resources(fw.out_vec), smallest)

    def _offers_reach(self, fw: _Framework, offers: list[_Offer]) -> None:
        for offer in offers:
            if not offer.rescinded:
                fw.inbox[offer.offer_id] = offer
        if not fw.deciding:
            self._decide(fw)

    def _decide(self, fw: _Framework) -> None:
        """The framework plans the offers in hand, thinks, then answers (Accepts for what it
        placed, a Decline for the rest); suppresses offers if nothing is left to place."""
        if not fw.inbox:
            return
        offers = [o for o in fw.inbox.values() if not o.rescinded]
        fw.inbox = {}
        arrivals = fw.arrivals
        if not fw.queue:
            decline_all = partial(self._answer, fw, [], offers, [], arrivals, [])
            self.clock.after(self.config.latency_seconds, decline_all)
            return
        # Offers too small for a task of every waiting job are declined without a plan (the
        # planner would place nothing there either), refused for longer as the batch framework
        # refuses them.
        usable: list[_Offer] = []
        unfit: list[_Offer] = []
        declined: list[_Offer] = []
        for offer in offers:
            (usable if fw.queue.fits_some(offer.grant.resources) else unfit).append(offer)
        placed: list[Placed] = []
        used: list[_Offer] = []
        think = 0.0
        if usable:
            plan = fw.queue.plan([o.proto() for o in usable])
            placed = fw.queue.take(plan)
            jobs = len({p.job.job for p in placed})
            think = fw.job_decision * jobs + self.config.task_decision * plan.placed
            unused = {o.offer_id for o in plan.unused}
            used = [o for o in usable if o.offer_id not in unused]
            for o in usable:  # judged against what still waits, as the batch framework
                if o.offer_id in unused:
                    fits = fw.queue.fits_some(o.grant.resources)
                    (declined if fits else unfit).append(o)
        for p in placed:
            fw.planned[p.job.job] = fw.planned.get(p.job.job, 0) + p.count
        self.recorder.decide_seconds[fw.role] += think
        fw.deciding = True

        def answer() -> None:
            send = partial(self._answer, fw, placed, declined, used, arrivals, unfit)
            self.clock.after(self.config.latency_seconds, send)
            fw.deciding = False
            self._decide(fw)  # offers that came while it thought

        self.clock.after(think, answer)

    # --- the master's side of an answer -------------------------------------------------------

    def _answer(
        self,
        fw: _Framework,
        placed: list[Placed],
        declined: list[_Offer],
        used: list[_Offer],
        arrivals: int,
        unfit: list[_Offer],
    ) -> None:
        now = self.clock.now
        by_agent: dict[str, list[Placed]] = {}
        for p in placed:
            by_agent.setdefault(p.agent_id, []).append(p)
        offers_of: dict[str, list[_Offer]] = {}
        for offer in used:
            offers_of.setdefault(offer.grant.agent_id, []).append(offer)
        for agent_id, tasks in by_agent.items():
            self._accept(fw, agent_id, offers_of.get(agent_id, []), tasks, now)
        if fw.queue:
            self._decline(fw, unfit, UNFIT_REFUSE_SECONDS)
            self._decline(fw, declined, DECLINE_REFUSE_SECONDS)
        else:
            self._decline(fw, unfit + declined, IDLE_REFUSE_SECONDS)
        if self.config.sized_offers and fw.queue and not fw.suppressed:
            self._tell_wants(fw)
        if self.alloc.take_reopened():
            self._change(None)  # a framework wants more than its offers hold: any agent
        if fw.arrivals != arrivals and fw.queue:
            # Work arrived during the round: its declines may hide room the new work could
            # use, so the batch framework revives once more.
            self._ask_revive(fw)
        elif not fw.queue and not fw.suppressed:
            fw.suppressed = True
            self.alloc.suppress(fw.role)

    def _decline(self, fw: _Framework, offers: list[_Offer], refuse: float) -> None:
        """The master's decline(): each offer's resources back (an optimistic one held
        nothing), then one filter per agent refusing the sum of what was declined there (a
        filter per offer would let the next refuse only its own part)."""
        refused: dict[str, Resources] = {}
        for offer in offers:
            if offer.rescinded:
                continue  # taken back meanwhile: the decline races a rescind
            self._drop(offer)
            grant = offer.grant
            if grant.exclusive:
                self.alloc.recover(fw.role, grant.agent_id, grant.resources, self.clock.now)
            else:
                self.alloc.withdraw(fw.role, grant.agent_id, grant.resources)
            had = refused.get(grant.agent_id)
            refused[grant.agent_id] = grant.resources if had is None else had + grant.resources
        for agent_id, resources in refused.items():
            if refuse:
                self.alloc.refuse(fw.role, agent_id, resources, self.clock.now, refuse)
            self._change(agent_id)

    def _drop(self, offer: _Offer) -> None:
        """The offer is answered or taken back: no longer outstanding on its agent, nor
        covering what its framework wants."""
        live = self._live.get(offer.grant.agent_id)
        if live is not None:
            live.pop(offer.offer_id, None)
        grant = offer.grant
        fw = self.frameworks[grant.framework_id]
        if fw.out.pop(offer.offer_id, None) is not None:
            add_into(fw.out_vec, scalar_vector(grant.resources), -1)
            self.alloc.answered(grant.framework_id, grant.resources)

    def _accept(
        self, fw: _Framework, agent_id: str, offers: list[_Offer], tasks: list[Placed], now: float
    ) -> None:
        for p in tasks:
            fw.planned[p.job.job] -= p.count
        needed = Resources.of()
        for p in tasks:
            needed = needed + shape_of(p.job, p.count)
        exclusive = all(o.grant.exclusive for o in offers)
        if not exclusive and not self._commit_optimistic(fw, agent_id, offers, needed, now):
            # ABORTED (a conflict, or a rival below its fair share): nothing launched; the
            # tasks wait again, and the framework revives for them.
            for p in tasks:
                fw.queue.give_back(p)
            self._ask_revive(fw)
            self._change(agent_id)
            return
        self.alloc.launched(fw.role, needed)  # the master takes it off the want
        for offer in offers:
            self._drop(offer)
        if exclusive:
            offered = Resources.of()
            for offer in offers:
                offered = offered + offer.grant.resources
            unused = offered - needed
            if unused:
                self.alloc.recover(fw.role, agent_id, unused, now, DECLINE_REFUSE_SECONDS)
                self._change(agent_id)
        self.recorder.launches += 1
        for p in tasks:
            self._start(fw, agent_id, p, now)

    def _commit_optimistic(
        self, fw: _Framework, agent_id: str, offers: list[_Offer], needed: Resources, now: float
    ) -> bool:
        """The master's OfferCycle.take: the offers must still stand and the tasks fit what
        is free now (else a conflict), and no framework below its fair share may have been
        offered the same room within the grace period (else BELOW_SHARE_PRIORITY); then the
        offers are withdrawn, what the tasks use committed, and the other offers on the agent
        that no longer fit are rescinded."""
        if any(o.rescinded for o in offers):
            for offer in offers:
                if not offer.rescinded:
                    offer.rescinded = True
                    self._drop(offer)
                    self.alloc.withdraw(fw.role, agent_id, offer.grant.resources)
            self.recorder.conflicts += 1
            return False
        fits = self.alloc.free(agent_id).contains(needed)
        rival = None
        if fits:
            grace = self.config.optimistic_grace_seconds
            rival = self.alloc.priority_rival(fw.role, agent_id, needed, now, grace)
        if not fits or rival is not None:
            for offer in offers:
                offer.rescinded = True  # gone with the failed Accept: nothing to decline
                self._drop(offer)
                self.alloc.withdraw(fw.role, agent_id, offer.grant.resources)
            if rival is None:
                self.recorder.conflicts += 1
            else:
                self.recorder.priority_refusals += 1
            return False
        offered = Resources.of()
        for offer in offers:
            self.alloc.withdraw(fw.role, agent_id, offer.grant.resources)
            offered = offered + offer.grant.resources
        self.alloc.commit(fw.role, agent_id, needed)
        unused = offered - needed
        if unused:
            self.alloc.refuse(fw.role, agent_id, unused, now, DECLINE_REFUSE_SECONDS)
        self._rescind_unsatisfiable(agent_id)
        return True

    def _rescind_unsatisfiable(self, agent_id: str) -> None:
        """The master's rescind_unsatisfiable: each framework's outstanding optimistic offers
        on the agent, summed, must still fit what is free; else they are taken back (wherever
        they are: on their way, in hand or being decided on) and the agent is woken."""
        free = self.alloc.free(agent_id)
        by_framework: dict[str, list[_Offer]] = {}
        for offer in self._live.get(agent_id, {}).values():
            if not offer.grant.exclusive:
                by_framework.setdefault(offer.grant.framework_id, []).append(offer)
        rescinded = False
        for framework_id, stale in by_framework.items():
            total = Resources.of()
            for offer in stale:
                total = total + offer.grant.resources
            if free.contains(total):
                continue
            inbox = self.frameworks[framework_id].inbox
            for offer in stale:
                offer.rescinded = True
                self._drop(offer)
                inbox.pop(offer.offer_id, None)
                self.alloc.withdraw(framework_id, agent_id, offer.grant.resources)
            rescinded = True
        if rescinded:
            self._change(agent_id)

    def _start(self, fw: _Framework, agent_id: str, p: Placed, now: float) -> None:
        job = p.job
        self.recorder.started(now, fw.role, job.resources, p.count)
        if job.job not in fw.queue.jobs and not fw.planned.get(job.job):
            self.recorder.launched(job.job, now)  # its last tasks start now
            fw.planned.pop(job.job, None)
        self.running_tasks += p.count
        # With preemption, each task on its own: a victim is one task, as the master's is.
        pieces = [Placed(job, agent_id, 1, p.sequence)] * p.count if self._preempting else [p]
        for piece in pieces:
            self._run_ids += 1
            running = _Running(f"r{self._run_ids}", fw, agent_id, piece, now)
            if self._preempting:
                self._running[running.key] = running
            self.clock.at(now + job.duration, partial(self._end, running))

    def _end(self, running: _Running) -> None:
        if not running.alive:
            return  # preempted before its end
        running.alive = False
        self._running.pop(running.key, None)
        now, p = self.clock.now, running.placed
        self.recorder.ended(now, running.fw.role, p.job.resources, p.count)
        self.running_tasks -= p.count
        self.alloc.recover(running.fw.role, running.agent_id, shape_of(p.job, p.count), now)
        self._change(running.agent_id)

    # --- preemption (the master's Preemptions.check, over the real plan) ------------------------

    def _preemption_tick(self) -> None:
        self._check_preemption()
        self.clock.after(self.config.preemption_check_seconds, self._preemption_tick)

    def _wants(self, fw: _Framework) -> dict[str, int] | None:
        """The shape of the first task in the role's queue order (thousandths), if any waits:
        what the batch framework tells the master it waits for (its Demand)."""
        if not fw.queue:
            return None
        first = order((w.queued for w in fw.queue.jobs.values()), "priority")[0]
        return scalar_vector(shape_of(fw.queue.jobs[first.job_id].job))

    def _check_preemption(self) -> None:
        timeout = self.config.preemption_timeout
        assert timeout is not None
        now = self.clock.now
        role_inputs, total = self.alloc.preemption_roles()
        inverse = inverse_totals(total)
        roles: dict[str, RoleState] = {}
        for name, (weight, guarantee, allocated, limit) in role_inputs.items():
            fw = self.frameworks.get(name)
            wants = self._wants(fw) if fw is not None else None
            roles[name] = RoleState(name, weight, allocated, guarantee, wants, limit=limit)
        fair = fair_shares(roles.values())
        due = []
        for name, state in roles.items():
            if starvation(state, fair.get(name, 0.0), inverse) is None:
                self._starved_since.pop(name, None)
                continue
            since = self._starved_since.setdefault(name, now)
            roles[name] = replace(state, starved_since=since)
            if now - since >= timeout:
                due.append(name)
        while self._kills and now - self._kills[0] >= 60.0:
            self._kills.popleft()
        budget = self.config.max_preemptions_per_minute - len(self._kills)
        if not due or budget <= 0:
            return
        candidates = [
            Candidate(
                r.fw.role,
                r.key,
                r.fw.role,
                r.agent_id,
                scalar_vector(shape_of(r.placed.job)),
                r.placed.job.priority,
                started_at=r.started,
            )
            for r in self._running.values()
        ]
        made = plan(
            roles,
            total,
            self.alloc.preemption_free(),
            candidates,
            now,
            float("inf"),
            timeout,
            max_victims=budget,
            usable=self.alloc.preemption_room(due),
        )
        for preemption in made:
            for victim in preemption.victims:
                self._preempt(self._running[victim.task_id], preemption.beneficiary)
            beneficiary = self.frameworks.get(preemption.beneficiary)
            if beneficiary is not None:
                self._ask_revive(beneficiary)  # its declines may hide the room just freed

    def _preempt(self, running: _Running, beneficiary: str) -> None:
        """Stops a victim now: its resources back, its task waiting again in its job's place
        (the batch framework reruns a preempted instance, not counted as a retry)."""
        now, fw, p = self.clock.now, running.fw, running.placed
        running.alive = False
        self._running.pop(running.key, None)
        self._kills.append(now)
        self.recorder.stopped(now, fw.role, beneficiary, p.job.resources, p.count)
        self.running_tasks -= p.count
        self.alloc.recover(fw.role, running.agent_id, shape_of(p.job, p.count), now)
        fw.queue.give_back(p)  # its job's wait now ends when this task starts again
        self._ask_revive(fw)
        self._change(running.agent_id)

    # --- samples ------------------------------------------------------------------------------

    def _sample(self) -> None:
        weights = self.trace.cluster.roles
        demands = {}
        for role, fw in self.frameworks.items():
            want = dict(self.recorder.running[role])
            for r, amount in fw.queue.demand().items():
                want[r] = want.get(r, 0.0) + amount
            demands[role] = want
        self.recorder.sample(self.clock.now, demands, weights)
