from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STAGING: _ClassVar[TaskState]
    TASK_STARTING: _ClassVar[TaskState]
    TASK_RUNNING: _ClassVar[TaskState]
    TASK_KILLING: _ClassVar[TaskState]
    TASK_FINISHED: _ClassVar[TaskState]
    TASK_FAILED: _ClassVar[TaskState]
    TASK_KILLED: _ClassVar[TaskState]
    TASK_ERROR: _ClassVar[TaskState]
    TASK_LOST: _ClassVar[TaskState]
    TASK_UNREACHABLE: _ClassVar[TaskState]
    TASK_DROPPED: _ClassVar[TaskState]
    TASK_GONE: _ClassVar[TaskState]
    TASK_UNKNOWN: _ClassVar[TaskState]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STAGING: TaskState
TASK_STARTING: TaskState
TASK_RUNNING: TaskState
TASK_KILLING: TaskState
TASK_FINISHED: TaskState
TASK_FAILED: TaskState
TASK_KILLED: TaskState
TASK_ERROR: TaskState
TASK_LOST: TaskState
TASK_UNREACHABLE: TaskState
TASK_DROPPED: TaskState
TASK_GONE: TaskState
TASK_UNKNOWN: TaskState

class Range(_message.Message):
    __slots__ = ("begin", "end")
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    begin: int
    end: int
    def __init__(self, begin: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class Resource(_message.Message):
    __slots__ = ("name", "type", "scalar", "ranges", "role")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SCALAR: _ClassVar[Resource.Type]
        RANGES: _ClassVar[Resource.Type]
    SCALAR: Resource.Type
    RANGES: Resource.Type
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SCALAR_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: Resource.Type
    scalar: float
    ranges: _containers.RepeatedCompositeFieldContainer[Range]
    role: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[Resource.Type, str]] = ..., scalar: _Optional[float] = ..., ranges: _Optional[_Iterable[_Union[Range, _Mapping]]] = ..., role: _Optional[str] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "text")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("agent_id", "hostname", "address", "resources", "attributes", "isolation")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    hostname: str
    address: str
    resources: _containers.RepeatedCompositeFieldContainer[Resource]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    isolation: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., address: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., isolation: _Optional[_Iterable[str]] = ...) -> None: ...

class FrameworkInfo(_message.Message):
    __slots__ = ("framework_id", "name", "user", "role", "failover_timeout_seconds", "capabilities", "hostname", "service_address", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    name: str
    user: str
    role: str
    failover_timeout_seconds: float
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    hostname: str
    service_address: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, framework_id: _Optional[str] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., failover_timeout_seconds: _Optional[float] = ..., capabilities: _Optional[_Iterable[str]] = ..., hostname: _Optional[str] = ..., service_address: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Offer(_message.Message):
    __slots__ = ("offer_id", "framework_id", "agent_id", "hostname", "resources", "attributes", "agent_address", "revocable")
    OFFER_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REVOCABLE_FIELD_NUMBER: _ClassVar[int]
    offer_id: str
    framework_id: str
    agent_id: str
    hostname: str
    resources: _containers.RepeatedCompositeFieldContainer[Resource]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    agent_address: str
    revocable: bool
    def __init__(self, offer_id: _Optional[str] = ..., framework_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ..., agent_address: _Optional[str] = ..., revocable: _Optional[bool] = ...) -> None: ...

class CommandInfo(_message.Message):
    __slots__ = ("argv", "shell", "environment", "user")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ARGV_FIELD_NUMBER: _ClassVar[int]
    SHELL_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    shell: str
    environment: _containers.ScalarMap[str, str]
    user: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., shell: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ...) -> None: ...

class HttpCheck(_message.Message):
    __slots__ = ("port_index", "path")
    PORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    port_index: int
    path: str
    def __init__(self, port_index: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class TcpCheck(_message.Message):
    __slots__ = ("port_index",)
    PORT_INDEX_FIELD_NUMBER: _ClassVar[int]
    port_index: int
    def __init__(self, port_index: _Optional[int] = ...) -> None: ...

class HealthCheck(_message.Message):
    __slots__ = ("http", "tcp", "command", "grace_period_seconds", "interval_seconds", "timeout_seconds", "max_consecutive_failures", "delay_seconds")
    HTTP_FIELD_NUMBER: _ClassVar[int]
    TCP_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    http: HttpCheck
    tcp: TcpCheck
    command: CommandInfo
    grace_period_seconds: float
    interval_seconds: float
    timeout_seconds: float
    max_consecutive_failures: int
    delay_seconds: float
    def __init__(self, http: _Optional[_Union[HttpCheck, _Mapping]] = ..., tcp: _Optional[_Union[TcpCheck, _Mapping]] = ..., command: _Optional[_Union[CommandInfo, _Mapping]] = ..., grace_period_seconds: _Optional[float] = ..., interval_seconds: _Optional[float] = ..., timeout_seconds: _Optional[float] = ..., max_consecutive_failures: _Optional[int] = ..., delay_seconds: _Optional[float] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task_id", "name", "agent_id", "resources", "command", "health_check", "kill_grace_period_seconds", "labels", "priority", "max_completion_seconds", "revocable", "container", "rlimits")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RlimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_FIELD_NUMBER: _ClassVar[int]
    KILL_GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPLETION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REVOCABLE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    RLIMITS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    name: str
    agent_id: str
    resources: _containers.RepeatedCompositeFieldContainer[Resource]
    command: CommandInfo
    health_check: HealthCheck
    kill_grace_period_seconds: float
    labels: _containers.ScalarMap[str, str]
    priority: int
    max_completion_seconds: float
    revocable: bool
    container: ContainerInfo
    rlimits: _containers.ScalarMap[str, int]
    def __init__(self, task_id: _Optional[str] = ..., name: _Optional[str] = ..., agent_id: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ..., command: _Optional[_Union[CommandInfo, _Mapping]] = ..., health_check: _Optional[_Union[HealthCheck, _Mapping]] = ..., kill_grace_period_seconds: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., max_completion_seconds: _Optional[float] = ..., revocable: _Optional[bool] = ..., container: _Optional[_Union[ContainerInfo, _Mapping]] = ..., rlimits: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ContainerInfo(_message.Message):
    __slots__ = ("image", "network")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    image: str
    network: str
    def __init__(self, image: _Optional[str] = ..., network: _Optional[str] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task_id", "state", "message", "source", "reason", "agent_id", "framework_id", "timestamp", "uuid", "healthy", "exit_code", "end_usage")
    class Source(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SOURCE_UNSPECIFIED: _ClassVar[TaskStatus.Source]
        SOURCE_MASTER: _ClassVar[TaskStatus.Source]
        SOURCE_AGENT: _ClassVar[TaskStatus.Source]
    SOURCE_UNSPECIFIED: TaskStatus.Source
    SOURCE_MASTER: TaskStatus.Source
    SOURCE_AGENT: TaskStatus.Source
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    END_USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    state: TaskState
    message: str
    source: TaskStatus.Source
    reason: str
    agent_id: str
    framework_id: str
    timestamp: float
    uuid: bytes
    healthy: bool
    exit_code: int
    end_usage: TaskEndUsage
    def __init__(self, task_id: _Optional[str] = ..., state: _Optional[_Union[TaskState, str]] = ..., message: _Optional[str] = ..., source: _Optional[_Union[TaskStatus.Source, str]] = ..., reason: _Optional[str] = ..., agent_id: _Optional[str] = ..., framework_id: _Optional[str] = ..., timestamp: _Optional[float] = ..., uuid: _Optional[bytes] = ..., healthy: _Optional[bool] = ..., exit_code: _Optional[int] = ..., end_usage: _Optional[_Union[TaskEndUsage, _Mapping]] = ...) -> None: ...

class TaskEndUsage(_message.Message):
    __slots__ = ("cpu_user_seconds", "cpu_system_seconds", "mem_peak_bytes")
    CPU_USER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MEM_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_user_seconds: float
    cpu_system_seconds: float
    mem_peak_bytes: int
    def __init__(self, cpu_user_seconds: _Optional[float] = ..., cpu_system_seconds: _Optional[float] = ..., mem_peak_bytes: _Optional[int] = ...) -> None: ...

class Filters(_message.Message):
    __slots__ = ("refuse_seconds",)
    REFUSE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    refuse_seconds: float
    def __init__(self, refuse_seconds: _Optional[float] = ...) -> None: ...
