from agora.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEventsRequest(_message.Message):
    __slots__ = ("since", "topics")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    since: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, since: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class ClusterEvent(_message.Message):
    __slots__ = ("index", "at", "topic", "kind", "subject", "detail", "principal")
    class DetailEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    index: int
    at: float
    topic: str
    kind: str
    subject: str
    detail: _containers.ScalarMap[str, str]
    principal: str
    def __init__(self, index: _Optional[int] = ..., at: _Optional[float] = ..., topic: _Optional[str] = ..., kind: _Optional[str] = ..., subject: _Optional[str] = ..., detail: _Optional[_Mapping[str, str]] = ..., principal: _Optional[str] = ...) -> None: ...

class ListPreemptionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPreemptionsResponse(_message.Message):
    __slots__ = ("preemptions",)
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    preemptions: _containers.RepeatedCompositeFieldContainer[PreemptionSummary]
    def __init__(self, preemptions: _Optional[_Iterable[_Union[PreemptionSummary, _Mapping]]] = ...) -> None: ...

class PreemptionSummary(_message.Message):
    __slots__ = ("at", "framework_id", "task_id", "role", "agent_id", "beneficiary", "reason", "message", "ended_at")
    AT_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BENEFICIARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    at: float
    framework_id: str
    task_id: str
    role: str
    agent_id: str
    beneficiary: str
    reason: str
    message: str
    ended_at: float
    def __init__(self, at: _Optional[float] = ..., framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., role: _Optional[str] = ..., agent_id: _Optional[str] = ..., beneficiary: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., ended_at: _Optional[float] = ...) -> None: ...

class AgentSummary(_message.Message):
    __slots__ = ("info", "state", "allocated", "offered", "task_count", "registered_at", "last_heartbeat_at", "drain_deadline")
    INFO_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AT_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    info: _common_pb2.AgentInfo
    state: str
    allocated: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    offered: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    task_count: int
    registered_at: float
    last_heartbeat_at: float
    drain_deadline: float
    def __init__(self, info: _Optional[_Union[_common_pb2.AgentInfo, _Mapping]] = ..., state: _Optional[str] = ..., allocated: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., offered: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., task_count: _Optional[int] = ..., registered_at: _Optional[float] = ..., last_heartbeat_at: _Optional[float] = ..., drain_deadline: _Optional[float] = ...) -> None: ...

class FrameworkSummary(_message.Message):
    __slots__ = ("info", "connected", "suppressed", "allocated", "offered", "dominant_share", "task_count", "registered_at", "principal")
    INFO_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    SUPPRESSED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    info: _common_pb2.FrameworkInfo
    connected: bool
    suppressed: bool
    allocated: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    offered: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    dominant_share: float
    task_count: int
    registered_at: float
    principal: str
    def __init__(self, info: _Optional[_Union[_common_pb2.FrameworkInfo, _Mapping]] = ..., connected: _Optional[bool] = ..., suppressed: _Optional[bool] = ..., allocated: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., offered: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., dominant_share: _Optional[float] = ..., task_count: _Optional[int] = ..., registered_at: _Optional[float] = ..., principal: _Optional[str] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("task_id", "name", "framework_id", "agent_id", "hostname", "state", "resources", "last_status", "framework_name")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_NAME_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    name: str
    framework_id: str
    agent_id: str
    hostname: str
    state: _common_pb2.TaskState
    resources: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    last_status: _common_pb2.TaskStatus
    framework_name: str
    def __init__(self, task_id: _Optional[str] = ..., name: _Optional[str] = ..., framework_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., resources: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., last_status: _Optional[_Union[_common_pb2.TaskStatus, _Mapping]] = ..., framework_name: _Optional[str] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("guarantee", "limit")
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    guarantee: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    limit: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    def __init__(self, guarantee: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., limit: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ...) -> None: ...

class RoleSummary(_message.Message):
    __slots__ = ("role", "weight", "quota", "allocated", "dominant_share", "framework_ids", "headroom")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_IDS_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_FIELD_NUMBER: _ClassVar[int]
    role: str
    weight: float
    quota: Quota
    allocated: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    dominant_share: float
    framework_ids: _containers.RepeatedScalarFieldContainer[str]
    headroom: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    def __init__(self, role: _Optional[str] = ..., weight: _Optional[float] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ..., allocated: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., dominant_share: _Optional[float] = ..., framework_ids: _Optional[_Iterable[str]] = ..., headroom: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ...) -> None: ...

class GetStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterState(_message.Message):
    __slots__ = ("master_id", "started_at", "agents", "frameworks", "tasks", "roles", "total", "leader", "warnings", "masters")
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    MASTERS_FIELD_NUMBER: _ClassVar[int]
    master_id: str
    started_at: float
    agents: _containers.RepeatedCompositeFieldContainer[AgentSummary]
    frameworks: _containers.RepeatedCompositeFieldContainer[FrameworkSummary]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    roles: _containers.RepeatedCompositeFieldContainer[RoleSummary]
    total: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    leader: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    masters: _containers.RepeatedCompositeFieldContainer[MasterSummary]
    def __init__(self, master_id: _Optional[str] = ..., started_at: _Optional[float] = ..., agents: _Optional[_Iterable[_Union[AgentSummary, _Mapping]]] = ..., frameworks: _Optional[_Iterable[_Union[FrameworkSummary, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ..., roles: _Optional[_Iterable[_Union[RoleSummary, _Mapping]]] = ..., total: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., leader: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., masters: _Optional[_Iterable[_Union[MasterSummary, _Mapping]]] = ...) -> None: ...

class MasterSummary(_message.Message):
    __slots__ = ("master_id", "address", "leading", "started_at", "elected_at")
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LEADING_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ELECTED_AT_FIELD_NUMBER: _ClassVar[int]
    master_id: str
    address: str
    leading: bool
    started_at: float
    elected_at: float
    def __init__(self, master_id: _Optional[str] = ..., address: _Optional[str] = ..., leading: _Optional[bool] = ..., started_at: _Optional[float] = ..., elected_at: _Optional[float] = ...) -> None: ...

class ListMastersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMastersResponse(_message.Message):
    __slots__ = ("masters",)
    MASTERS_FIELD_NUMBER: _ClassVar[int]
    masters: _containers.RepeatedCompositeFieldContainer[MasterSummary]
    def __init__(self, masters: _Optional[_Iterable[_Union[MasterSummary, _Mapping]]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentSummary]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentSummary, _Mapping]]] = ...) -> None: ...

class ListFrameworksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFrameworksResponse(_message.Message):
    __slots__ = ("frameworks",)
    FRAMEWORKS_FIELD_NUMBER: _ClassVar[int]
    frameworks: _containers.RepeatedCompositeFieldContainer[FrameworkSummary]
    def __init__(self, frameworks: _Optional[_Iterable[_Union[FrameworkSummary, _Mapping]]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("framework_id", "agent_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    agent_id: str
    def __init__(self, framework_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ...) -> None: ...

class ListRolesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRolesResponse(_message.Message):
    __slots__ = ("roles",)
    ROLES_FIELD_NUMBER: _ClassVar[int]
    roles: _containers.RepeatedCompositeFieldContainer[RoleSummary]
    def __init__(self, roles: _Optional[_Iterable[_Union[RoleSummary, _Mapping]]] = ...) -> None: ...

class UpdateWeightRequest(_message.Message):
    __slots__ = ("role", "weight")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    role: str
    weight: float
    def __init__(self, role: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class UpdateWeightResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ("role", "quota")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    role: str
    quota: Quota
    def __init__(self, role: _Optional[str] = ..., quota: _Optional[_Union[Quota, _Mapping]] = ...) -> None: ...

class SetQuotaResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExplainOffersRequest(_message.Message):
    __slots__ = ("framework",)
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    framework: str
    def __init__(self, framework: _Optional[str] = ...) -> None: ...

class ExplainOffersResponse(_message.Message):
    __slots__ = ("framework_id", "reasons")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, framework_id: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class DrainAgentRequest(_message.Message):
    __slots__ = ("agent_id", "deadline_seconds")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    deadline_seconds: float
    def __init__(self, agent_id: _Optional[str] = ..., deadline_seconds: _Optional[float] = ...) -> None: ...

class DrainAgentResponse(_message.Message):
    __slots__ = ("deadline", "tasks")
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    deadline: float
    tasks: int
    def __init__(self, deadline: _Optional[float] = ..., tasks: _Optional[int] = ...) -> None: ...

class UndrainAgentRequest(_message.Message):
    __slots__ = ("agent_id",)
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    def __init__(self, agent_id: _Optional[str] = ...) -> None: ...

class UndrainAgentResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TeardownFrameworkRequest(_message.Message):
    __slots__ = ("framework",)
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    framework: str
    def __init__(self, framework: _Optional[str] = ...) -> None: ...

class TeardownFrameworkResponse(_message.Message):
    __slots__ = ("framework_id",)
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    def __init__(self, framework_id: _Optional[str] = ...) -> None: ...

class KillTaskRequest(_message.Message):
    __slots__ = ("framework", "task_id", "grace_period_seconds")
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    framework: str
    task_id: str
    grace_period_seconds: float
    def __init__(self, framework: _Optional[str] = ..., task_id: _Optional[str] = ..., grace_period_seconds: _Optional[float] = ...) -> None: ...

class KillTaskResponse(_message.Message):
    __slots__ = ("framework_id",)
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    def __init__(self, framework_id: _Optional[str] = ...) -> None: ...
