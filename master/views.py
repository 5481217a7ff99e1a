"""The Operator API's view of the registry: summaries of agents, frameworks, tasks and roles;
and the frameworks' shared view of the cluster's resources (Scheduler.GetClusterView)."""

from __future__ import annotations

from agora.common import EMPTY, Resources
from agora.common.credentials import is_loopback
from agora.master.core import MasterCore
from agora.master.registry import Registry, Task
from agora.v1 import operator_pb2, scheduler_pb2


def _by(items, key) -> dict[str, list]:
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def _by_agent(reg: Registry) -> tuple[dict[str, list], dict[str, list]]:
    """Outstanding offers and live tasks by agent: one pass over each, not one per agent
    (clusters have thousands of each)."""
    return (
        _by(reg.offers.values(), lambda o: o.agent_id),
        _by(reg.tasks.values(), lambda t: t.agent_id),
    )


def agent_summaries(
    core: MasterCore, agent_ids: list[str] | None = None
) -> list[operator_pb2.AgentSummary]:
    """Every agent's summary, or those of `agent_ids` (a slice, for callers that must not hold
    the event loop for the whole cluster at once)."""
    reg = core.reg
    offers, tasks = _by_agent(reg)
    out = []
    ids = sorted(reg.agents) if agent_ids is None else agent_ids
    for agent_id in ids:
        agent = reg.agents.get(agent_id)
        if agent is None:  # removed since the caller listed it
            continue
        offered = _sum(o.resources for o in offers.get(agent_id, ()))
        kept = _sum(o.resources for o in offers.get(agent_id, ()) if o.exclusive)
        used = _sum(t.resources for t in tasks.get(agent_id, ()))
        out.append(
            operator_pb2.AgentSummary(
                info=agent.info,
                state=agent.state,
                allocated=(used + kept).to_proto(),
                offered=offered.to_proto(),
                task_count=len(tasks.get(agent_id, ())),
                registered_at=agent.registered_at,
                last_heartbeat_at=agent.last_heartbeat_at,
                drain_deadline=agent.drain_deadline,
            )
        )
    return out


def cluster_view(core: MasterCore) -> scheduler_pb2.ClusterView:
    """Every agent's total, free, offered and used resources: what a framework may plan with
    beyond its own offers. Free is what the allocator holds unallocated (nothing for an agent
    recovered from the store and not yet re-registered: its tasks are not known yet)."""
    reg = core.reg
    offers, tasks = _by_agent(reg)
    view = scheduler_pb2.ClusterView()
    for agent_id in sorted(reg.agents):
        agent = reg.agents[agent_id]
        free = core.allocator.free(agent_id) if core.ledger.in_allocator(agent) else EMPTY
        view.agents.add(
            agent_id=agent_id,
            hostname=agent.info.hostname,
            attributes=agent.info.attributes,
            state=agent.state,
            total=agent.total.to_proto(),
            free=free.to_proto(),
            offered=_sum(o.resources for o in offers.get(agent_id, ())).to_proto(),
            used=_sum(t.resources for t in tasks.get(agent_id, ())).to_proto(),
        )
    return view


def framework_summaries(core: MasterCore) -> list[operator_pb2.FrameworkSummary]:
    reg = core.reg
    offers = _by(reg.offers.values(), lambda o: o.framework_id)
    tasks = _by(reg.tasks.values(), lambda t: t.framework_id)
    out = []
    for framework_id, framework in sorted(reg.frameworks.items()):
        offered = _sum(o.resources for o in offers.get(framework_id, ()))
        kept = _sum(o.resources for o in offers.get(framework_id, ()) if o.exclusive)
        used = _sum(t.resources for t in tasks.get(framework_id, ()))
        try:
            share = float(core.allocator.dominant_share(framework_id))
        except (KeyError, ValueError):
            share = 0.0
        out.append(
            operator_pb2.FrameworkSummary(
                info=framework.info,
                connected=framework.connected,
                suppressed=framework.suppressed,
                allocated=(used + kept).to_proto(),
                offered=offered.to_proto(),
                dominant_share=share,
                task_count=len(tasks.get(framework_id, ())),
                registered_at=framework.registered_at,
                principal=framework.principal,
            )
        )
    return out


def task_summaries(
    core: MasterCore, framework_id: str = "", agent_id: str = ""
) -> list[operator_pb2.TaskSummary]:
    reg = core.reg
    tasks: list[Task] = [*reg.tasks.values(), *reg.completed.values()]
    out = []
    for task in tasks:
        if framework_id and task.framework_id != framework_id:
            continue
        if agent_id and task.agent_id != agent_id:
            continue
        agent = reg.agents.get(task.agent_id)
        summary = operator_pb2.TaskSummary(
            task_id=task.task_id,
            name=task.info.name,
            framework_id=task.framework_id,
            agent_id=task.agent_id,
            hostname=agent.info.hostname if agent else "",
            state=task.state,
            resources=task.resources.to_proto(),
            framework_name=_framework_name(reg, task),
        )
        if task.last_status is not None:
            summary.last_status.CopyFrom(task.last_status)
        out.append(summary)
    return out


def role_summaries(core: MasterCore) -> list[operator_pb2.RoleSummary]:
    """Allocator.role_summaries() as protos."""
    out = []
    for row in core.allocator.role_summaries():
        summary = operator_pb2.RoleSummary(
            role=row["role"],
            weight=row["weight"],
            dominant_share=row["dominant_share"],
            framework_ids=row["frameworks"],
            allocated=row["allocated"].to_proto(),
            headroom=row["headroom"].to_proto(),
        )
        summary.quota.guarantee.extend(row["guarantee"].to_proto())
        if row["limit"] is not None:
            summary.quota.limit.extend(row["limit"].to_proto())
        out.append(summary)
    return out


def master_summaries(core: MasterCore) -> list[operator_pb2.MasterSummary]:
    """Every master of the set, the leader first: from the election when there is one, else
    just this master, which has led since it started."""
    return [
        operator_pb2.MasterSummary(
            master_id=m.master_id,
            address=m.address,
            leading=i == 0,
            started_at=m.started_at,
            elected_at=m.elected_at if i == 0 else 0.0,
        )
        for i, m in enumerate(core.masters())
    ]


def cluster_state(
    core: MasterCore,
    leader: str,
    agents: list[operator_pb2.AgentSummary] | None = None,
    total: Resources | None = None,
) -> operator_pb2.ClusterState:
    """The whole state; `agents` and `total` when the caller built them already (in slices)."""
    if total is None:
        total = _sum(a.total for a in core.reg.agents.values())
    masters = master_summaries(core)
    return operator_pb2.ClusterState(
        master_id=core.master_id,
        started_at=core.started_at,
        agents=agent_summaries(core) if agents is None else agents,
        frameworks=framework_summaries(core),
        tasks=task_summaries(core),
        roles=role_summaries(core),
        total=total.to_proto(),
        leader=leader or (masters[0].address if masters else ""),
        warnings=security_warnings(core.config),
        masters=masters,
    )


def security_warnings(config) -> list[str]:
    """What `cluster state` and the master's log warn about the master's own exposure."""
    if config.credentials.secure or is_loopback(config.host):
        return []
    return [
        f"the master listens on {config.host}:{config.port} without TLS (--insecure): anyone "
        "who reaches it can launch tasks; see `agora tls`"
    ]


def _sum(values) -> Resources:
    total = EMPTY
    for value in values:
        total = total + value
    return total


def _framework_name(reg, task: Task) -> str:
    framework = reg.frameworks.get(task.framework_id)
    return (
        framework.info.name
        if framework is not None and framework.info.name
        else (task.framework_name)
    )
