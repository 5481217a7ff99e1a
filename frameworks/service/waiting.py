"""Why an app's wanted instances are not running, in words for people. Pure.

In order: the cluster cannot host them at all (too big for every agent, or constraints no agent
satisfies: `unplaceable`), old versions hold the places they need during a rolling update, the
restart backoff delays them, the upgrade strategy makes them wait for old instances to go, or
they wait for offers with enough room (with what the last offers lacked).
"""

from __future__ import annotations

from collections.abc import Sequence

from agora.frameworks.service import apps as appdefs
from agora.frameworks.service.backoff import RestartBackoff
from agora.frameworks.service.instances import Instance
from agora.frameworks.service.placement import AgentSlot, Needs, explain
from agora.v1 import services_pb2


def needs_of(app: services_pb2.App) -> Needs:
    return Needs(app.cpus, app.mem, app.disk, app.ports)


def why_waiting(
    app: services_pb2.App,
    missing: int,
    launch: int,
    live: Sequence[Instance],
    catalog: Sequence[AgentSlot] | None,
    backoff: RestartBackoff,
    offer_note: str,
    now: float,
) -> tuple[str, bool]:
    """(reason, unplaceable) for `missing` instances of the app's version not yet launched;
    `launch` is how many the planner would launch now, `live` the instances not ended or being
    killed, `catalog` every agent of the cluster (None: not known yet)."""
    if missing <= 0:
        return "", False
    if catalog is not None:
        constraints = appdefs.constraints_of(app)
        reason, never = explain(
            missing, needs_of(app), constraints, [i.facts() for i in live], catalog, app.role
        )
        if never:
            # Old versions hold places the new ones need (UNIQUE, MAX_PER): that ends as they
            # are replaced, unless the new version alone could not be placed either.
            new = [i.facts() for i in live if i.version == app.version]
            if len(new) < len(live):
                _, never_alone = explain(
                    missing, needs_of(app), constraints, new, catalog, app.role
                )
                if not never_alone:
                    detail = reason.split(": ", 1)[-1]
                    return (
                        f"{missing} instance(s) wait for old instances to be replaced: {detail}"
                    ), False
            return reason, True
    else:
        reason = f"{missing} instance(s) waiting for offers"
    if not backoff.ready(now):
        return (
            f"{missing} instance(s) delayed by restart backoff after {backoff.failures} "
            f"failure(s): next launch in {backoff.remaining(now):.1f}s"
        ), False
    if launch == 0:
        return (
            f"{missing} instance(s) wait for old instances to be replaced (upgrade strategy)"
        ), False
    if offer_note:
        reason = f"{reason}; last offers: {offer_note}"
    return reason, False
