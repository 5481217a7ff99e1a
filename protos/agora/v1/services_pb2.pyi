from agora.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Constraint(_message.Message):
    __slots__ = ("field", "operator", "value")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    field: str
    operator: str
    value: str
    def __init__(self, field: _Optional[str] = ..., operator: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class BackoffPolicy(_message.Message):
    __slots__ = ("backoff_seconds", "backoff_factor", "max_launch_delay_seconds")
    BACKOFF_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FACTOR_FIELD_NUMBER: _ClassVar[int]
    MAX_LAUNCH_DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    backoff_seconds: float
    backoff_factor: float
    max_launch_delay_seconds: float
    def __init__(self, backoff_seconds: _Optional[float] = ..., backoff_factor: _Optional[float] = ..., max_launch_delay_seconds: _Optional[float] = ...) -> None: ...

class UpgradeStrategy(_message.Message):
    __slots__ = ("minimum_health_capacity", "maximum_over_capacity")
    MINIMUM_HEALTH_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_OVER_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    minimum_health_capacity: float
    maximum_over_capacity: float
    def __init__(self, minimum_health_capacity: _Optional[float] = ..., maximum_over_capacity: _Optional[float] = ...) -> None: ...

class App(_message.Message):
    __slots__ = ("id", "cmd", "args", "instances", "cpus", "mem", "disk", "ports", "env", "role", "health_check", "constraints", "backoff", "upgrade_strategy", "version", "labels", "kill_grace_period_seconds", "priority", "container")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    CMD_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    UPGRADE_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    KILL_GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    id: str
    cmd: str
    args: _containers.RepeatedScalarFieldContainer[str]
    instances: int
    cpus: float
    mem: float
    disk: float
    ports: int
    env: _containers.ScalarMap[str, str]
    role: str
    health_check: _common_pb2.HealthCheck
    constraints: _containers.RepeatedCompositeFieldContainer[Constraint]
    backoff: BackoffPolicy
    upgrade_strategy: UpgradeStrategy
    version: str
    labels: _containers.ScalarMap[str, str]
    kill_grace_period_seconds: float
    priority: int
    container: _common_pb2.ContainerInfo
    def __init__(self, id: _Optional[str] = ..., cmd: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., instances: _Optional[int] = ..., cpus: _Optional[float] = ..., mem: _Optional[float] = ..., disk: _Optional[float] = ..., ports: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ..., role: _Optional[str] = ..., health_check: _Optional[_Union[_common_pb2.HealthCheck, _Mapping]] = ..., constraints: _Optional[_Iterable[_Union[Constraint, _Mapping]]] = ..., backoff: _Optional[_Union[BackoffPolicy, _Mapping]] = ..., upgrade_strategy: _Optional[_Union[UpgradeStrategy, _Mapping]] = ..., version: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., kill_grace_period_seconds: _Optional[float] = ..., priority: _Optional[int] = ..., container: _Optional[_Union[_common_pb2.ContainerInfo, _Mapping]] = ...) -> None: ...

class PutAppRequest(_message.Message):
    __slots__ = ("app", "create_only")
    APP_FIELD_NUMBER: _ClassVar[int]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    app: App
    create_only: bool
    def __init__(self, app: _Optional[_Union[App, _Mapping]] = ..., create_only: _Optional[bool] = ...) -> None: ...

class PutAppResponse(_message.Message):
    __slots__ = ("app", "created", "deploying")
    APP_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    DEPLOYING_FIELD_NUMBER: _ClassVar[int]
    app: App
    created: bool
    deploying: bool
    def __init__(self, app: _Optional[_Union[App, _Mapping]] = ..., created: _Optional[bool] = ..., deploying: _Optional[bool] = ...) -> None: ...

class GetAppRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class AppTask(_message.Message):
    __slots__ = ("task_id", "agent_id", "hostname", "host", "ports", "state", "healthy", "version", "launched_at", "killing", "message")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    KILLING_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    agent_id: str
    hostname: str
    host: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    state: _common_pb2.TaskState
    healthy: bool
    version: str
    launched_at: float
    killing: bool
    message: str
    def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., host: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., healthy: _Optional[bool] = ..., version: _Optional[str] = ..., launched_at: _Optional[float] = ..., killing: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("from_versions", "to_version", "old_instances", "new_instances", "new_healthy")
    FROM_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    OLD_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    NEW_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    NEW_HEALTHY_FIELD_NUMBER: _ClassVar[int]
    from_versions: str
    to_version: str
    old_instances: int
    new_instances: int
    new_healthy: int
    def __init__(self, from_versions: _Optional[str] = ..., to_version: _Optional[str] = ..., old_instances: _Optional[int] = ..., new_instances: _Optional[int] = ..., new_healthy: _Optional[int] = ...) -> None: ...

class AppStatus(_message.Message):
    __slots__ = ("app", "state", "staged", "running", "healthy", "unhealthy", "tasks", "deployments", "waiting_reason", "unplaceable", "delayed_until", "last_failure", "last_failure_at", "last_health_failure", "last_health_failure_at", "last_preemption", "last_preemption_at")
    APP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    UNPLACEABLE_FIELD_NUMBER: _ClassVar[int]
    DELAYED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEALTH_FAILURE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEALTH_FAILURE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    LAST_PREEMPTION_AT_FIELD_NUMBER: _ClassVar[int]
    app: App
    state: str
    staged: int
    running: int
    healthy: int
    unhealthy: int
    tasks: _containers.RepeatedCompositeFieldContainer[AppTask]
    deployments: _containers.RepeatedCompositeFieldContainer[Deployment]
    waiting_reason: str
    unplaceable: bool
    delayed_until: float
    last_failure: str
    last_failure_at: float
    last_health_failure: str
    last_health_failure_at: float
    last_preemption: str
    last_preemption_at: float
    def __init__(self, app: _Optional[_Union[App, _Mapping]] = ..., state: _Optional[str] = ..., staged: _Optional[int] = ..., running: _Optional[int] = ..., healthy: _Optional[int] = ..., unhealthy: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[AppTask, _Mapping]]] = ..., deployments: _Optional[_Iterable[_Union[Deployment, _Mapping]]] = ..., waiting_reason: _Optional[str] = ..., unplaceable: _Optional[bool] = ..., delayed_until: _Optional[float] = ..., last_failure: _Optional[str] = ..., last_failure_at: _Optional[float] = ..., last_health_failure: _Optional[str] = ..., last_health_failure_at: _Optional[float] = ..., last_preemption: _Optional[str] = ..., last_preemption_at: _Optional[float] = ...) -> None: ...

class ListAppsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAppsResponse(_message.Message):
    __slots__ = ("apps",)
    APPS_FIELD_NUMBER: _ClassVar[int]
    apps: _containers.RepeatedCompositeFieldContainer[AppStatus]
    def __init__(self, apps: _Optional[_Iterable[_Union[AppStatus, _Mapping]]] = ...) -> None: ...

class ScaleAppRequest(_message.Message):
    __slots__ = ("id", "instances")
    ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    id: str
    instances: int
    def __init__(self, id: _Optional[str] = ..., instances: _Optional[int] = ...) -> None: ...

class ScaleAppResponse(_message.Message):
    __slots__ = ("app",)
    APP_FIELD_NUMBER: _ClassVar[int]
    app: App
    def __init__(self, app: _Optional[_Union[App, _Mapping]] = ...) -> None: ...

class DeleteAppRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteAppResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("task_id", "host", "ports", "hostname", "agent_id", "version")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    host: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    hostname: str
    agent_id: str
    version: str
    def __init__(self, task_id: _Optional[str] = ..., host: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., hostname: _Optional[str] = ..., agent_id: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class GetEndpointsRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class WatchEndpointsRequest(_message.Message):
    __slots__ = ("app_id",)
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    def __init__(self, app_id: _Optional[str] = ...) -> None: ...

class Endpoints(_message.Message):
    __slots__ = ("app_id", "endpoints", "instances")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    instances: int
    def __init__(self, app_id: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ..., instances: _Optional[int] = ...) -> None: ...
