"""What the API shows of an app: its status (counts, tasks, deployments, state) and its
endpoints (the serving instances' host:ports). Pure functions of the app and its instances."""

from __future__ import annotations

from collections.abc import Sequence

from agora.frameworks.service.backoff import RestartBackoff
from agora.frameworks.service.instances import Instance
from agora.v1 import services_pb2


def _by_age(instances: Sequence[Instance]) -> list[Instance]:
    return sorted(instances, key=lambda i: (i.launched_at, i.task_id))


def endpoints(app: services_pb2.App, instances: Sequence[Instance]) -> services_pb2.Endpoints:
    serving = [i for i in _by_age(instances) if i.serving]
    return services_pb2.Endpoints(
        app_id=app.id, endpoints=[i.endpoint() for i in serving], instances=app.instances
    )


def endpoints_key(reply: services_pb2.Endpoints) -> tuple:
    """Equal for endpoint lists a watcher need not hear about twice."""
    return (tuple((e.task_id, e.host, tuple(e.ports)) for e in reply.endpoints), reply.instances)


def app_status(
    app: services_pb2.App,
    instances: Sequence[Instance],
    backoff: RestartBackoff,
    waiting_reason: str,
    unplaceable: bool,
    now: float,
) -> services_pb2.AppStatus:
    mine = _by_age(instances)
    out = services_pb2.AppStatus(app=app, tasks=[i.to_proto() for i in mine])
    out.staged = sum(1 for i in mine if not i.running and not i.ended)
    out.running = sum(1 for i in mine if i.running)
    out.healthy = sum(1 for i in mine if i.serving)
    out.unhealthy = sum(1 for i in mine if i.running and i.healthy is False)
    old = [i for i in mine if i.version != app.version and not i.killing]
    new = [i for i in mine if i.version == app.version and not i.killing]
    if old:
        out.deployments.add(
            from_versions=",".join(sorted({i.version for i in old})),
            to_version=app.version,
            old_instances=len(old),
            new_instances=len(new),
            new_healthy=sum(1 for i in new if i.serving),
        )
    out.waiting_reason = waiting_reason
    out.unplaceable = unplaceable
    if not backoff.ready(now):
        out.delayed_until = backoff.delayed_until
    if app.instances == 0 and not mine:
        out.state = "SUSPENDED"
    elif old:
        out.state = "DEPLOYING"
    elif waiting_reason and unplaceable:
        out.state = "WAITING"
    elif out.delayed_until and len(new) < app.instances:
        out.state = "DELAYED"
    elif out.healthy >= app.instances and len(new) == app.instances:
        out.state = "RUNNING"
    else:
        out.state = "WAITING" if waiting_reason else "DEPLOYING"
    return out
