"""Why a framework gets no offers: the allocator's reasons, in words an operator can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.common import EMPTY
from agora.master.allocator.drf import MILLI, dominant_share, scalar_vector
from agora.master.allocator.eligibility import FILTERED, GPU_AGENT, TOO_SMALL

if TYPE_CHECKING:
    from agora.master.allocator.view import AllocatorView


def explain(alloc: AllocatorView, framework_id: str, now: float) -> list[str]:
    """Reasons, most fundamental first; one "not blocked" line when nothing stands in the way.

    Reads the allocator only through its read-only view."""
    fw = alloc.framework(framework_id)
    if fw is None:
        return [f"unknown framework {framework_id}: it is not subscribed"]
    role = alloc.role(fw.role)
    reasons: list[str] = []
    if not fw.active:
        reasons.append(
            "inactive: the framework is disconnected; offers resume when it re-subscribes"
        )
    if fw.suppressed:
        reasons.append("suppressed: the framework asked for no offers; Revive resumes them")
    if fw.sated:
        wants = ", ".join(f"{k}:{v / MILLI:g}" for k, v in sorted(fw.wants.items())) or "nothing"
        reasons.append(
            f"its unanswered offers cover all it said it waits for ({wants}): more come "
            "when it answers them or says it wants more (Revive or Demand with wants)"
        )

    # Every agent with something free, through the allocator's own eligibility rule.
    judged = alloc.judge(framework_id, now)
    filtered = {
        j.agent.agent_id: j.until for j in judged if j.why == FILTERED and j.until is not None
    }
    if filtered:
        # `now` is the master's monotonic clock, meaningless to a reader: say how long is left.
        soonest, latest = min(filtered.values()) - now, max(filtered.values()) - now
        span = f"{latest:.1f} s" if latest - soonest < 0.05 else f"{soonest:.1f}-{latest:.1f} s"
        reasons.append(
            f"filtered on {len(filtered)} agent(s) for {span} more: it declined offers of what "
            "they have free now; anything more there (a task ending) is offered at once, and "
            "Revive clears the filters"
        )

    consumed = alloc.consumption(role)
    if role.quota is not None:
        full = role.quota.at_limit(consumed)
        if full:
            detail = ", ".join(
                f"{n} {consumed.get(n, 0) / MILLI:g}/{role.quota.limit[n] / MILLI:g}" for n in full
            )
            reasons.append(f"role {role.name} at quota limit ({detail})")

    gpu_agents = [j for j in judged if j.why == GPU_AGENT]
    if any(j.offer is not None for j in gpu_agents):
        reasons.append(
            f"{len(gpu_agents)} agent(s) with free resources have GPUs: they are kept for "
            "frameworks with the GPU_RESOURCES capability"
        )
    small = [j for j in judged if j.why == TOO_SMALL]
    if small and fw.smallest:
        task = ", ".join(f"{k}:{v / MILLI:g}" for k, v in sorted(fw.smallest.items()))
        reasons.append(
            f"{len(small)} agent(s) have less free than its smallest waiting task ({task}): "
            "they are offered to others"
        )
    # What could it be offered on the agents it may use right now?
    usable = [j for j in judged if j.why is None]
    fits = [j.agent.agent_id for j in usable if j.offer is not None]
    # Agents whose whole offer quota caps take away, and those whose offer they make smaller.
    held_back = sum(
        1
        for j in usable
        if j.offer is None and alloc.has_quota_roles and alloc.fits_min(scalar_vector(j.plain))
    )
    cut = sum(1 for j in usable if j.offer is not None and j.offer != j.plain)
    at_limit = role.quota is not None and bool(role.quota.at_limit(consumed))
    owed = [(r, lack) for r, lack in alloc.headroom_roles() if r.name != role.name]
    if owed and not at_limit and (held_back or cut):
        reasons.append(_headroom_reason(alloc, owed, held_back, cut))

    if not fits and not filtered:
        # A full cluster is the whole story: say it first, as the operator's question is "why".
        free = sum((a.free for a in alloc.agents() if a.active), EMPTY)
        if not free:
            reasons.insert(0, "no free resources on any agent: all are offered or in use")
            return reasons
    if not fits:
        mins = " | ".join(str(m) for m in alloc.min_allocatable) or "anything"
        holds = f"; it holds resources on {len(fw.allocated)} agent(s)" if fw.allocated else ""
        if usable or not filtered:  # else the filters already say it all
            reasons.append(
                f"nothing free fits the minimum allocatable ({mins}) on the "
                f"{len(usable)} agent(s) it may use{holds}"
            )
        return reasons

    if fw.active and not fw.suppressed and not fw.sated:
        share = dominant_share(fw.vec, alloc.inverse_totals)
        ahead = _frameworks_ahead(alloc, framework_id)
        if ahead:
            reasons.append(
                f"waiting behind {ahead} framework(s) with lower shares (its dominant share "
                f"{share:.3f}, its role's {dominant_share(role.vec, alloc.inverse_totals):.3f}); "
                f"{len(fits)} agent(s) have free resources it could use"
            )
        else:
            reasons.append(
                f"not blocked: {len(fits)} agent(s) have free resources for it and it is first "
                "in line; the next allocation will offer them"
            )
    return reasons


def _headroom_reason(alloc: AllocatorView, owed: list, held_back: int, cut: int) -> str:
    """Which roles' guarantees hold free resources back, and whether anyone there wants them
    (a guarantee for a role with no framework holds the cluster back for nobody)."""
    parts = []
    for other, lack in owed:
        if not other.frameworks:
            who = "no framework of that role is subscribed, so nobody is using them"
        elif not other.eligible and not any(f.sated for f in alloc.frameworks_of(other)):
            who = "its frameworks are suppressed or disconnected, so nobody is using them"
        elif not other.eligible:
            who = "its frameworks' offers cover what they said they wait for"
        else:
            who = "its frameworks have not taken them yet"
        parts.append(f"role {other.name} lacks {lack.format()} of its quota guarantee ({who})")
    where = []
    if held_back:
        where.append(f"take all that {held_back} agent(s) have free")
    if cut:
        where.append(f"cut the offers of {cut} agent(s) to what is left")
    return (
        "free resources are held back as headroom for other roles' quota guarantees, and "
        f"{' and '.join(where)}: {'; '.join(parts)}. `agora cluster quota ROLE` with a "
        "smaller guarantee, or a framework in that role, releases them"
    )


def _frameworks_ahead(alloc: AllocatorView, framework_id: str) -> int:
    ahead = 0
    for fid in alloc.framework_order():
        if fid == framework_id:
            return ahead
        ahead += 1
    return ahead
