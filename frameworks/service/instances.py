"""An app's instance: one task the service framework launched, as it tracks and stores it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from agora.frameworks.sdk import is_terminal
from agora.frameworks.sdk.constraints import AgentFacts
from agora.frameworks.service.deploy import InstanceView
from agora.v1 import common_pb2, services_pb2


@dataclass
class Instance:
    task_id: str
    app_id: str
    version: str
    agent_id: str
    hostname: str
    host: str  # the agent's IP or name that clients use to reach the task
    ports: list[int]
    attributes: dict[str, str]
    launched_at: float
    has_check: bool
    state: common_pb2.TaskState = common_pb2.TASK_STAGING
    healthy: bool | None = None
    killing: bool = False
    kill_reason: str = ""
    message: str = ""
    running_since: float = 0.0  # when it was first seen RUNNING (0: not yet)
    extra: dict = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.state == common_pb2.TASK_RUNNING

    @property
    def ended(self) -> bool:
        return is_terminal(self.state)

    def view(self, draining: bool = False) -> InstanceView:
        """As the planner sees it; `draining`: its agent is draining."""
        return InstanceView(
            self.task_id,
            self.version,
            self.running,
            self.healthy,
            self.has_check,
            self.launched_at,
            self.killing,
            draining,
        )

    @property
    def serving(self) -> bool:
        return self.view().serving

    def facts(self) -> AgentFacts:
        return AgentFacts(self.agent_id, self.hostname, self.attributes)

    def to_proto(self) -> services_pb2.AppTask:
        task = services_pb2.AppTask(
            task_id=self.task_id,
            agent_id=self.agent_id,
            hostname=self.hostname,
            host=self.host,
            ports=self.ports,
            state=self.state,
            version=self.version,
            launched_at=self.launched_at,
            killing=self.killing,
            message=self.kill_reason or self.message,
        )
        if self.healthy is not None:
            task.healthy = self.healthy
        return task

    def endpoint(self) -> services_pb2.Endpoint:
        return services_pb2.Endpoint(
            task_id=self.task_id,
            host=self.host,
            ports=self.ports,
            hostname=self.hostname,
            agent_id=self.agent_id,
            version=self.version,
        )

    def dumps(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> Instance:
        return cls(**json.loads(text))
