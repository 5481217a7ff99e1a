"""Preemption in the master, on the paused-clock harness (issue 34's first acceptance case): role
a fills two agents; role b, guaranteed 1 cpu, waits past its timeout and gets exactly what it is
owed, by stopping exactly as many of a's tasks, and nothing is taken back afterwards."""

from __future__ import annotations

from core_harness import CoreHarness, task

from agora.common import Resources
from agora.common.task_states import REASON_PREEMPTED
from agora.v1 import common_pb2

AGENT = "cpus:2;mem:2048"
HALF = "cpus:0.5;mem:64"


def _cluster(b_guarantee: str | None = "cpus:1", **config):
    """Role a's 8 tasks fill 2 agents of 2 cpus; role b (guaranteed `b_guarantee`) arrives."""
    h = CoreHarness(**{"guarantee_preemption_timeout_seconds": 5.0, **config})
    agents = {}
    for i in range(2):
        agent = h.agent(AGENT, hostname=f"h{i}")
        agents[agent.agent_id] = agent
    a = h.framework("a", role="a")
    n = 0
    for offer in a.offers():
        tasks = [task(f"a{n + i}", HALF) for i in range(4)]
        n += 4
        a.accept([offer.offer_id], tasks)
        for t in tasks:
            agents[offer.agent_id].status(a.framework_id, t.task_id, common_pb2.TASK_RUNNING)
    if b_guarantee is not None:
        h.core.allocator.set_quota("b", Resources.parse(b_guarantee), None)
    b = h.framework("b", role="b")
    _decline_scraps(b)
    return h, agents, a, b


def _decline_scraps(framework) -> None:
    """Declines what holds no task of HALF's size (memory left on full agents)."""
    scraps = [
        o.offer_id
        for o in framework.offers()
        if not Resources.from_proto(o.resources).contains(Resources.parse(HALF))
    ]
    if scraps:
        framework.call("Decline", offer_ids=scraps)


def _wait(h: CoreHarness, framework, seconds: float) -> None:
    """Time passes; the framework declines scraps as they come, as a real one does at once."""
    for _ in range(round(seconds / 0.25)):
        _decline_scraps(framework)
        h.advance(0.25)


def _kills(agents) -> list:
    return [k for agent in agents.values() for k in agent.inbox.of("kill_task")]


def _end_killed(agents, a, kills, done: set) -> None:
    """Each agent reports the tasks it was told to kill as killed, once."""
    for agent in agents.values():
        for kill in agent.inbox.of("kill_task"):
            if kill.task_id not in done:
                done.add(kill.task_id)
                agent.status(a.framework_id, kill.task_id, common_pb2.TASK_KILLED,
                             reason=kill.reason, message=kill.message)  # fmt: skip


def test_a_role_below_its_guarantee_gets_it_by_preempting_exactly_what_it_needs():
    h, agents, a, b = _cluster()
    assert len(h.core.reg.tasks) == 8 and not b.offers()  # full: b declined the scraps
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    _wait(h, b, 4.5)
    assert not _kills(agents)  # starved, but not for 5 s yet
    # "Why no offers" says what b waits for, and when that ends.
    [why] = [r for r in h.core.explain_offers(b.framework_id) if r.startswith("role b")]
    assert "below its quota guarantee with work it cannot place: in 1 s" in why
    assert "(its preemption timeout, 5 s)" in why
    _wait(h, b, 1.0)
    [first] = _kills(agents)
    assert first.reason == REASON_PREEMPTED
    # Its framework got a notice naming the task, why, and by when it is gone.
    [notice] = a.inbox.of("preemption")
    assert notice.task_id == first.task_id and notice.message == first.message
    assert notice.deadline > h.clock.wall()
    assert "role b needs" in first.message and "(guarantee)" in first.message
    done: set[str] = set()
    launched = 0
    for _ in range(40):  # b launches on what is freed, and asks for its second task
        _end_killed(agents, a, _kills(agents), done)
        for offer in b.offers():
            if launched < 2 and Resources.from_proto(offer.resources).contains(
                Resources.parse(HALF)
            ):
                b.accept([offer.offer_id], [task(f"b{launched}", HALF)])
                launched += 1
                if launched == 2:
                    b.call("Demand", unmet=[])  # nothing more to place
        _decline_scraps(b)
        h.advance(0.5)
        if launched == 2:
            break
    assert launched == 2
    assert len(_kills(agents)) == 2  # exactly as many as b needed
    assert h.clock.now() <= 5.5 + 2.0  # within its timeout + 2 s
    # Over the next minute nothing more is stopped, by anyone.
    h.advance(60)
    assert len(_kills(agents)) == 2
    stopped = [p.task_id for p in h.core.preemptions.history]
    assert sorted(stopped) == sorted(k.task_id for k in _kills(agents))


def test_without_a_timeout_nothing_is_ever_preempted():
    h = CoreHarness()
    agent = h.agent(AGENT)
    a = h.framework("a", role="a")
    [offer] = a.offers()
    a.accept([offer.offer_id], [task(f"a{i}", HALF) for i in range(4)])
    h.core.allocator.set_quota("b", Resources.parse("cpus:1"), None)
    b = h.framework("b", role="b")
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    h.advance(120)
    assert not agent.inbox.of("kill_task")


def test_a_suppressed_framework_or_one_holding_offers_has_no_demand():
    h, agents, a, b = _cluster()
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    b.call("Suppress")
    _wait(h, b, 10)
    assert not _kills(agents)
    b.call("Revive")
    _wait(h, b, 6)
    assert len(_kills(agents)) == 1


def test_weighted_fair_shares_converge_to_half_and_neither_takes_back():
    # a (weight 1) holds both agents; b (weight 1) wants more than half: b is given tasks by
    # preemption up to half the cluster, and then neither role stops the other's tasks,
    # though both go on asking for more.
    h, agents, a, b = _cluster(
        b_guarantee=None,
        guarantee_preemption_timeout_seconds=None,
        fair_share_preemption_timeout_seconds=3.0,
    )
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    a.call("Demand", unmet=Resources.parse(HALF).to_proto())  # a wants more too
    done: set[str] = set()
    launched = 0
    for _ in range(200):  # 50 s
        _end_killed(agents, a, _kills(agents), done)
        for offer in b.offers():
            if Resources.from_proto(offer.resources).contains(Resources.parse(HALF)):
                b.accept([offer.offer_id], [task(f"b{launched}", HALF)])
                launched += 1
        _decline_scraps(b)
        _decline_scraps(a)
        h.advance(0.25)
    # b holds half the cluster (4 tasks of 0.5 cpu of 4 cpus): the tasks stopped for it.
    assert launched == 4 and len(_kills(agents)) == 4
    running = {"a": 0, "b": 0}
    for t in h.core.reg.tasks.values():
        running["a" if t.framework_id == a.framework_id else "b"] += 1
    assert running == {"a": 4, "b": 4}  # 2 cpus each: half the cluster each
    # Nothing is taken back over the next minute, though a and b still ask for more.
    _wait(h, b, 60)
    assert len(_kills(agents)) == 4


def test_a_roles_own_timeout_turns_preemption_on_for_it_alone():
    # The cluster's guarantee timeout is 5 s; b's own, 1 s.
    h, agents, a, b = _cluster(role_preemption_timeouts={"b": 1.0})
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    _wait(h, b, 1.5)
    assert len(_kills(agents)) == 1  # after b's own 1 s, not the cluster's 5 s


def test_a_role_without_a_timeout_of_its_own_waits_when_only_others_have_one():
    # Only role x has a timeout: b, starved as ever, preempts nothing (and nothing breaks).
    h, agents, a, b = _cluster(
        guarantee_preemption_timeout_seconds=None, role_preemption_timeouts={"x": 1.0}
    )
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    _wait(h, b, 10)
    assert not _kills(agents)


def test_within_a_role_a_waiting_higher_priority_task_stops_a_lower_priority_one():
    # One role holds the cluster with tasks of priority 0 and 5; its framework waits to place
    # a task of priority 3: after the fair-share timeout its priority-0 task is stopped.
    h = CoreHarness(fair_share_preemption_timeout_seconds=2.0)
    agent = h.agent("cpus:1;mem:1024")
    a = h.framework("a", role="a")
    [offer] = a.offers()
    low, high = task("low", HALF, priority=0), task("high", HALF, priority=5)
    a.accept([offer.offer_id], [low, high])
    for t in (low, high):
        agent.status(a.framework_id, t.task_id, common_pb2.TASK_RUNNING)
    a.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    _wait(h, a, 1.5)
    assert not agent.inbox.of("kill_task")
    _wait(h, a, 1.0)
    [kill] = agent.inbox.of("kill_task")
    assert kill.task_id == "low" and kill.reason == REASON_PREEMPTED
    assert [p.reason for p in h.core.preemptions.history] == ["priority"]


def test_reconciliation_after_a_failover_gives_the_same_answer(tmp_path):
    """Issue 34, item 4: a preempted task whose end the framework acknowledged is reconciled
    as TASK_KILLED with the preemption's message, by the master that preempted it and by a
    new one over the same registry (tasks themselves are not stored: the preemption is).

    The reason is REASON_RECONCILIATION, not REASON_PREEMPTED: as in Mesos, a reconciliation
    answer says where it comes from (the master's records, not the agent), and a framework
    that acted on the first TASK_KILLED must not take it for a second end. The why is in the
    message, the same before and after the failover: it names the preemption and who needed
    what."""
    from agora.v1 import scheduler_pb2

    h, agents, a, b = _cluster(state_dir=tmp_path)
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    _wait(h, b, 5.5)
    [kill] = _kills(agents)
    _end_killed(agents, a, [kill], set())
    h.advance(0.5)  # the master sees the victim's end
    [preempted] = h.core.preemptions.history
    assert preempted.ended_at  # seen ending
    where = preempted.agent_id
    wanted = [scheduler_pb2.ReconcileRequest.Task(task_id=kill.task_id, agent_id=where)]

    def reconciled(framework) -> common_pb2.TaskStatus:
        framework.call("Reconcile", tasks=wanted)
        [status] = [
            u.status for u in framework.inbox.of("update") if u.status.task_id == kill.task_id
        ][-1:]
        return status

    before = reconciled(a)
    assert before.state == common_pb2.TASK_KILLED and before.message == kill.message
    assert before.reason == "REASON_RECONCILIATION"
    assert before.message.startswith("preempted: role b needs cpus:0.5;mem:64 (guarantee)")

    h2 = h.restart()  # the same registry: what a new leader reads
    a2 = h2.framework("a", role="a", subscribe=False)
    a2.subscribe(a.framework_id)
    after = reconciled(a2)
    assert (after.state, after.reason, after.message) == (
        before.state,
        before.reason,
        before.message,
    )
    assert after.agent_id == where
    assert [p.task_id for p in h2.core.preemptions.history] == [kill.task_id]


def test_no_more_than_the_bound_is_stopped_a_minute_and_the_rest_follow_later():
    # b (weight 1, as a) is owed half the cluster, 4 of a's tasks; the master may stop 2 a
    # minute (--max-preemptions-per-minute 2). b's demand lasts throughout.
    h, agents, a, b = _cluster(
        b_guarantee=None,
        guarantee_preemption_timeout_seconds=None,
        fair_share_preemption_timeout_seconds=3.0,
        max_preemptions_per_minute=2,
    )
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    done: set[str] = set()
    killed_at: dict[str, float] = {}  # task id -> when its kill was sent (the master's clock)
    launched = 0
    for _ in range(400):  # 100 s
        for kill in _kills(agents):
            killed_at.setdefault(kill.task_id, h.clock.now())
        _end_killed(agents, a, _kills(agents), done)
        for offer in b.offers():
            if Resources.from_proto(offer.resources).contains(Resources.parse(HALF)):
                b.accept([offer.offer_id], [task(f"b{launched}", HALF)])
                launched += 1
        _decline_scraps(b)
        h.advance(0.25)
    times = sorted(killed_at.values())
    assert len(times) == 4 and launched == 4  # in the end b holds its half
    # Never more than 2 in any minute: the first two soon after b's 3 s, the next two only
    # once a minute has passed since the first of them.
    assert all(later - earlier >= 60.0 for earlier, later in zip(times, times[2:], strict=False))
    assert times[1] < 10.0 and times[2] >= times[0] + 60.0


def _fits_half(offer) -> bool:
    return Resources.from_proto(offer.resources).contains(Resources.parse(HALF))


def _one_priority_role(*tasks_, agent_resources: str = "cpus:1;mem:1024"):
    """Role a's framework runs `tasks_` on one agent that they fill; the fair-share timeout is
    2 s (priority preemption's)."""
    h = CoreHarness(fair_share_preemption_timeout_seconds=2.0)
    agent = h.agent(agent_resources)
    a = h.framework("a", role="a")
    [offer] = a.offers()
    a.accept([offer.offer_id], list(tasks_))
    for t in tasks_:
        agent.status(a.framework_id, t.task_id, common_pb2.TASK_RUNNING)
    return h, agent, a


def _relaunch_low(h, agent, a, victim: str, name: str) -> None:
    """The victim ends; its framework puts a priority-0 task in the room freed."""
    agent.status(a.framework_id, victim, common_pb2.TASK_KILLED, reason=REASON_PREEMPTED)
    h.advance(0.5)
    [offer] = [o for o in a.offers() if _fits_half(o)]
    a.accept([offer.offer_id], [task(name, HALF, priority=0)])
    agent.status(a.framework_id, name, common_pb2.TASK_RUNNING)


def test_priority_preemption_pauses_when_the_freed_room_goes_to_lower_priority_work():
    """A framework that does not place by priority (a FIFO queue) puts its re-queued
    priority-0 task back where a task was stopped for its priority-3 demand: stopping that one
    again at once would only loop (each kill followed by the same launch). The master pauses
    priority preemption for that demand, says why, and takes it up again when the pause ends
    (twice the 2 s fair-share timeout, then twice that at each repeat), or at once when the
    demand changes: a steady high-priority job is not left without it for good."""
    h, agent, a = _one_priority_role(task("low", HALF, priority=0),
                                     task("high", HALF, priority=5))  # fmt: skip
    a.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    _wait(h, a, 2.5)
    kills = lambda: [k.task_id for k in agent.inbox.of("kill_task")]  # noqa: E731
    assert kills() == ["low"]
    _relaunch_low(h, agent, a, "low", "low-2")
    _wait(h, a, 3.5)
    assert kills() == ["low"]  # paused: no loop
    [why] = [r for r in h.core.explain_offers(a.framework_id) if r.startswith("role a's")]
    assert "placed lower-priority tasks where a task was preempted" in why
    assert "priority-3 demand" in why and "or until it changes" in why
    _wait(h, a, 1.0)  # 4 s: the pause is over, the demand is served again
    assert kills() == ["low", "low-2"]
    _relaunch_low(h, agent, a, "low-2", "low-3")  # the same again: the pause doubles, 8 s
    _wait(h, a, 7.5)
    assert kills() == ["low", "low-2"]
    _wait(h, a, 1.0)
    assert kills() == ["low", "low-2", "low-3"]
    _relaunch_low(h, agent, a, "low-3", "low-4")
    _wait(h, a, 1.0)
    assert len(kills()) == 3
    # A new demand (priority 4) is taken up at once: the priority-0 task may go for it.
    a.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=4)
    _wait(h, a, 0.5)
    assert kills() == ["low", "low-2", "low-3", "low-4"]


def test_lower_priority_work_placed_during_the_kill_grace_is_not_a_loop():
    """While the victim is in its kill grace the framework places a priority-0 task in room
    another task of its own left: that is not the victim's room. Once the victim has ended,
    the framework puts its priority-3 task there, and the next task of its demand is served
    by priority preemption as promptly (no pause)."""
    h, agent, a = _one_priority_role(
        task("low-1", HALF, priority=0),
        task("low-2", HALF, priority=0),
        task("other", HALF, priority=5),
        task("high", HALF, priority=5),
        agent_resources="cpus:2;mem:1024",
    )
    a.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    _wait(h, a, 2.5)
    [first] = agent.inbox.of("kill_task")
    # In the victim's grace: "other" finishes, and a priority-0 task takes its room.
    agent.status(a.framework_id, "other", common_pb2.TASK_FINISHED)
    h.advance(0.25)
    [offer] = [o for o in a.offers() if _fits_half(o)]
    a.accept([offer.offer_id], [task("filler", HALF, priority=0)])
    agent.status(a.framework_id, "filler", common_pb2.TASK_RUNNING)
    h.advance(0.5)
    agent.status(a.framework_id, first.task_id, common_pb2.TASK_KILLED, reason=REASON_PREEMPTED)
    h.advance(0.5)  # the master looks at the agent before the framework uses the freed room
    [offer] = [o for o in a.offers() if _fits_half(o)]
    a.accept([offer.offer_id], [task("urgent-1", HALF, priority=3)])
    agent.status(a.framework_id, "urgent-1", common_pb2.TASK_RUNNING)
    _wait(h, a, 1.0)
    # The demand goes on (a second priority-3 task): another priority-0 task is stopped.
    assert len(agent.inbox.of("kill_task")) == 2
    assert not [r for r in h.core.explain_offers(a.framework_id) if r.startswith("role a's")]


def test_with_two_frameworks_in_the_role_the_loop_is_seen_as_the_demanders_own():
    """Role a has two frameworks. a2 holds an offer it has not answered (so its own, higher,
    demand does not preempt), and a1 waits to place a priority-3 task. The room freed for
    a1 is watched against a1's demand, not the role's first one (a2's): when a1 puts
    priority-0 work there, priority preemption pauses rather than stopping it again."""
    h, agent, a1 = _one_priority_role(task("low", HALF, priority=0),
                                      task("high", HALF, priority=5))  # fmt: skip
    a2 = h.framework("a2", role="a")
    h.advance(0.25)
    assert a2.offers()  # the memory left: held, unanswered
    a2.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=5)
    a1.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    _wait(h, a1, 2.5)
    assert [k.task_id for k in agent.inbox.of("kill_task")] == ["low"]
    _relaunch_low(h, agent, a1, "low", "low-2")
    _wait(h, a1, 3.0)
    assert [k.task_id for k in agent.inbox.of("kill_task")] == ["low"]
    [why] = [r for r in h.core.explain_offers(a1.framework_id) if r.startswith("role a's")]
    assert "framework a placed lower-priority tasks" in why


def test_another_frameworks_work_in_the_freed_room_does_not_pause_the_demander():
    """Role a's other framework, a2, is given the room freed for a1's priority-3 demand and
    puts a priority-0 task there. That says nothing about how a1 places: a1 is not paused,
    and a2's task goes for a1's demand in turn."""
    h, agent, a1 = _one_priority_role(
        task("low", HALF, priority=0),
        task("high", HALF, priority=5),
        agent_resources="cpus:1;mem:128",  # no scraps: a2 holds nothing
    )
    a2 = h.framework("a2", role="a")
    a1.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    _wait(h, a1, 2.5)
    assert [k.task_id for k in agent.inbox.of("kill_task")] == ["low"]
    agent.status(a1.framework_id, "low", common_pb2.TASK_KILLED, reason=REASON_PREEMPTED)
    h.advance(0.25)
    [offer] = [o for o in a2.offers() if _fits_half(o)]  # a2 holds less: it is offered it
    a2.accept([offer.offer_id], [task("a2-low", HALF, priority=0)])
    agent.status(a2.framework_id, "a2-low", common_pb2.TASK_RUNNING)
    for _ in range(12):  # 3 s; a2 declines what comes back to it
        for framework in (a1, a2):
            if framework.offers():
                framework.call("Decline", offer_ids=[o.offer_id for o in framework.offers()],
                               filters={"refuse_seconds": 0})  # fmt: skip
        h.advance(0.25)
    assert [k.task_id for k in agent.inbox.of("kill_task")] == ["low", "a2-low"]


def test_priority_preemption_goes_on_while_the_freed_room_serves_the_demand():
    # The framework places by priority: each freed half cpu goes to a priority-3 task, so
    # both priority-0 tasks are stopped, one after the other, for its two.
    h = CoreHarness(fair_share_preemption_timeout_seconds=2.0)
    agent = h.agent("cpus:1;mem:1024")
    a = h.framework("a", role="a")
    [offer] = a.offers()
    a.accept([offer.offer_id], [task("low-1", HALF), task("low-2", HALF)])
    for name in ("low-1", "low-2"):
        agent.status(a.framework_id, name, common_pb2.TASK_RUNNING)
    a.call("Demand", unmet=Resources.parse(HALF).to_proto(), priority=3)
    placed = 0
    for _ in range(40):  # 10 s
        for kill in agent.inbox.of("kill_task")[placed:]:
            agent.status(a.framework_id, kill.task_id, common_pb2.TASK_KILLED,
                         reason=REASON_PREEMPTED)  # fmt: skip
        for offer in a.offers():
            if Resources.from_proto(offer.resources).contains(Resources.parse(HALF)):
                placed += 1
                a.accept([offer.offer_id], [task(f"urgent-{placed}", HALF, priority=3)])
                agent.status(a.framework_id, f"urgent-{placed}", common_pb2.TASK_RUNNING)
        _decline_scraps(a)
        h.advance(0.25)
    assert sorted(k.task_id for k in agent.inbox.of("kill_task")) == ["low-1", "low-2"]
    assert placed == 2


def _fill(framework, agents, limit: int, prefix: str) -> list[str]:
    """The framework launches up to `limit` HALF tasks in the offers it holds (running), and
    declines the rest of them."""
    launched: list[str] = []
    for offer in framework.offers():
        left, n = Resources.from_proto(offer.resources), 0
        while n < limit - len(launched) and left.contains(Resources.parse(HALF)):
            left, n = left - Resources.parse(HALF), n + 1
        if n <= 0:
            framework.call("Decline", offer_ids=[offer.offer_id], filters={"refuse_seconds": 1e3})
            continue
        tasks = [task(f"{prefix}{len(launched) + i}", HALF) for i in range(n)]
        framework.accept([offer.offer_id], tasks)
        for t in tasks:
            agents[offer.agent_id].status(framework.framework_id, t.task_id,
                                          common_pb2.TASK_RUNNING)  # fmt: skip
        launched += [t.task_id for t in tasks]
    return launched


def test_a_role_is_not_owed_beyond_its_quota_limit():
    """b (weight 1, as a: fair share half the cluster, 2 cpus) has a quota limit of 1.5 cpus
    and runs 1 cpu; a fills the rest. b, wanting more for good, preempts one of a's tasks,
    which takes it to its limit, and then nothing more: at its limit, though below its fair
    share, it could never be offered what another stop would free (before, it saw no room
    and stopped a's tasks at --max-preemptions-per-minute for ever)."""
    h = CoreHarness(fair_share_preemption_timeout_seconds=3.0)
    h.core.allocator.set_quota("b", None, Resources.parse("cpus:1.5"))
    agents = {}
    for i in range(2):
        agent = h.agent(AGENT, hostname=f"h{i}")
        agents[agent.agent_id] = agent
    b = h.framework("b", role="b")
    assert len(_fill(b, agents, 2, "b")) == 2
    _fill(b, agents, 0, "b")  # b refuses the rest for now
    a = h.framework("a", role="a")
    h.advance(0.25)
    assert len(_fill(a, agents, 6, "a")) == 6  # the cluster is full
    b.call("Revive")
    b.call("Demand", unmet=Resources.parse(HALF).to_proto())
    # Which roles' room the master reads, and when (only roles that may preempt now).
    read: list[tuple[float, list[str]]] = []
    room = h.core.allocator.preemption_room
    h.core.allocator.preemption_room = lambda roles: (  # type: ignore[method-assign]
        read.append((h.clock.now(), list(roles))) or room(roles)
    )
    done: set[str] = set()
    launched = 0
    for _ in range(240):  # 60 s
        _end_killed(agents, a, _kills(agents), done)
        for offer in b.offers():
            if Resources.from_proto(offer.resources).contains(Resources.parse(HALF)):
                b.accept([offer.offer_id], [task(f"b-more{launched}", HALF)])
                launched += 1
        _decline_scraps(b)
        h.advance(0.25)
    assert launched == 1 and len(_kills(agents)) == 1  # up to its limit, no further
    # At its limit (and with no lower-priority tasks of its own) b is not due: its room is
    # not read on the turns after that, though its demand goes on.
    reached = max(t for t, roles in read)
    assert all(roles == ["b"] for _, roles in read) and reached < 10.0
    # Not starved at its limit: "why no offers" names the limit, and no preemption.
    reasons = h.core.explain_offers(b.framework_id)
    assert "role b at quota limit (cpus 1.5/1.5)" in reasons
    assert not [r for r in reasons if "preempt" in r]
