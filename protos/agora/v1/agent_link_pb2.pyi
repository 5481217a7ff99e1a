from agora.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunningTask(_message.Message):
    __slots__ = ("framework_id", "task", "state")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task: _common_pb2.TaskInfo
    state: _common_pb2.TaskState
    def __init__(self, framework_id: _Optional[str] = ..., task: _Optional[_Union[_common_pb2.TaskInfo, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "status_update", "batch")
    class Register(_message.Message):
        __slots__ = ("info", "tasks", "version", "accepts_batches")
        INFO_FIELD_NUMBER: _ClassVar[int]
        TASKS_FIELD_NUMBER: _ClassVar[int]
        VERSION_FIELD_NUMBER: _ClassVar[int]
        ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
        info: _common_pb2.AgentInfo
        tasks: _containers.RepeatedCompositeFieldContainer[RunningTask]
        version: str
        accepts_batches: bool
        def __init__(self, info: _Optional[_Union[_common_pb2.AgentInfo, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[RunningTask, _Mapping]]] = ..., version: _Optional[str] = ..., accepts_batches: _Optional[bool] = ...) -> None: ...
    class Heartbeat(_message.Message):
        __slots__ = ("timestamp",)
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        timestamp: float
        def __init__(self, timestamp: _Optional[float] = ...) -> None: ...
    class StatusUpdate(_message.Message):
        __slots__ = ("framework_id", "status")
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        STATUS_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        status: _common_pb2.TaskStatus
        def __init__(self, framework_id: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.TaskStatus, _Mapping]] = ...) -> None: ...
    class Batch(_message.Message):
        __slots__ = ("messages",)
        MESSAGES_FIELD_NUMBER: _ClassVar[int]
        messages: _containers.RepeatedCompositeFieldContainer[AgentMessage]
        def __init__(self, messages: _Optional[_Iterable[_Union[AgentMessage, _Mapping]]] = ...) -> None: ...
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STATUS_UPDATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    register: AgentMessage.Register
    heartbeat: AgentMessage.Heartbeat
    status_update: AgentMessage.StatusUpdate
    batch: AgentMessage.Batch
    def __init__(self, register: _Optional[_Union[AgentMessage.Register, _Mapping]] = ..., heartbeat: _Optional[_Union[AgentMessage.Heartbeat, _Mapping]] = ..., status_update: _Optional[_Union[AgentMessage.StatusUpdate, _Mapping]] = ..., batch: _Optional[_Union[AgentMessage.Batch, _Mapping]] = ...) -> None: ...

class MasterMessage(_message.Message):
    __slots__ = ("registered", "run_task", "kill_task", "status_update_ack", "shutdown", "heartbeat", "shutdown_framework", "batch")
    class Registered(_message.Message):
        __slots__ = ("agent_id", "master_id", "heartbeat_interval_seconds", "master_principal", "accepts_batches", "epoch")
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        MASTER_ID_FIELD_NUMBER: _ClassVar[int]
        HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
        MASTER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
        ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        agent_id: str
        master_id: str
        heartbeat_interval_seconds: float
        master_principal: str
        accepts_batches: bool
        epoch: int
        def __init__(self, agent_id: _Optional[str] = ..., master_id: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[float] = ..., master_principal: _Optional[str] = ..., accepts_batches: _Optional[bool] = ..., epoch: _Optional[int] = ...) -> None: ...
    class RunTask(_message.Message):
        __slots__ = ("framework_id", "task", "framework", "framework_principal")
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        TASK_FIELD_NUMBER: _ClassVar[int]
        FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
        FRAMEWORK_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        task: _common_pb2.TaskInfo
        framework: _common_pb2.FrameworkInfo
        framework_principal: str
        def __init__(self, framework_id: _Optional[str] = ..., task: _Optional[_Union[_common_pb2.TaskInfo, _Mapping]] = ..., framework: _Optional[_Union[_common_pb2.FrameworkInfo, _Mapping]] = ..., framework_principal: _Optional[str] = ...) -> None: ...
    class KillTask(_message.Message):
        __slots__ = ("framework_id", "task_id", "grace_period_seconds", "reason", "message")
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        TASK_ID_FIELD_NUMBER: _ClassVar[int]
        GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
        REASON_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        task_id: str
        grace_period_seconds: float
        reason: str
        message: str
        def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., grace_period_seconds: _Optional[float] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
    class StatusUpdateAck(_message.Message):
        __slots__ = ("framework_id", "task_id", "uuid")
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        TASK_ID_FIELD_NUMBER: _ClassVar[int]
        UUID_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        task_id: str
        uuid: bytes
        def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., uuid: _Optional[bytes] = ...) -> None: ...
    class Shutdown(_message.Message):
        __slots__ = ("reason",)
        REASON_FIELD_NUMBER: _ClassVar[int]
        reason: str
        def __init__(self, reason: _Optional[str] = ...) -> None: ...
    class Heartbeat(_message.Message):
        __slots__ = ("timestamp",)
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        timestamp: float
        def __init__(self, timestamp: _Optional[float] = ...) -> None: ...
    class ShutdownFramework(_message.Message):
        __slots__ = ("framework_id",)
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        def __init__(self, framework_id: _Optional[str] = ...) -> None: ...
    class Batch(_message.Message):
        __slots__ = ("messages",)
        MESSAGES_FIELD_NUMBER: _ClassVar[int]
        messages: _containers.RepeatedCompositeFieldContainer[MasterMessage]
        def __init__(self, messages: _Optional[_Iterable[_Union[MasterMessage, _Mapping]]] = ...) -> None: ...
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    RUN_TASK_FIELD_NUMBER: _ClassVar[int]
    KILL_TASK_FIELD_NUMBER: _ClassVar[int]
    STATUS_UPDATE_ACK_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    registered: MasterMessage.Registered
    run_task: MasterMessage.RunTask
    kill_task: MasterMessage.KillTask
    status_update_ack: MasterMessage.StatusUpdateAck
    shutdown: MasterMessage.Shutdown
    heartbeat: MasterMessage.Heartbeat
    shutdown_framework: MasterMessage.ShutdownFramework
    batch: MasterMessage.Batch
    def __init__(self, registered: _Optional[_Union[MasterMessage.Registered, _Mapping]] = ..., run_task: _Optional[_Union[MasterMessage.RunTask, _Mapping]] = ..., kill_task: _Optional[_Union[MasterMessage.KillTask, _Mapping]] = ..., status_update_ack: _Optional[_Union[MasterMessage.StatusUpdateAck, _Mapping]] = ..., shutdown: _Optional[_Union[MasterMessage.Shutdown, _Mapping]] = ..., heartbeat: _Optional[_Union[MasterMessage.Heartbeat, _Mapping]] = ..., shutdown_framework: _Optional[_Union[MasterMessage.ShutdownFramework, _Mapping]] = ..., batch: _Optional[_Union[MasterMessage.Batch, _Mapping]] = ...) -> None: ...
