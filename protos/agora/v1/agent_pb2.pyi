from agora.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadFileRequest(_message.Message):
    __slots__ = ("framework_id", "task_id", "path", "offset", "length")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task_id: str
    path: str
    offset: int
    length: int
    def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("data", "offset", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    size: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data", "offset")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ("framework_id", "task_id", "path")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task_id: str
    path: str
    def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class FileEntry(_message.Message):
    __slots__ = ("path", "is_dir", "size", "mtime")
    PATH_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    path: str
    is_dir: bool
    size: int
    mtime: float
    def __init__(self, path: _Optional[str] = ..., is_dir: _Optional[bool] = ..., size: _Optional[int] = ..., mtime: _Optional[float] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileEntry]
    def __init__(self, files: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ...) -> None: ...

class ListAgentTasksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[AgentTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[AgentTask, _Mapping]]] = ...) -> None: ...

class AgentTask(_message.Message):
    __slots__ = ("framework_id", "task", "state", "sandbox", "pid", "unacknowledged_updates")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    UNACKNOWLEDGED_UPDATES_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task: _common_pb2.TaskInfo
    state: _common_pb2.TaskState
    sandbox: str
    pid: int
    unacknowledged_updates: int
    def __init__(self, framework_id: _Optional[str] = ..., task: _Optional[_Union[_common_pb2.TaskInfo, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., sandbox: _Optional[str] = ..., pid: _Optional[int] = ..., unacknowledged_updates: _Optional[int] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("framework_id", "task_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task_id: str
    def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class TaskUsage(_message.Message):
    __slots__ = ("framework_id", "task_id", "cpu_user_seconds", "cpu_system_seconds", "cpus_allocated", "mem_rss_bytes", "mem_limit_bytes", "disk_used_bytes", "disk_allocated_bytes", "source", "timestamp")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_USER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_SYSTEM_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPUS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    MEM_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEM_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    task_id: str
    cpu_user_seconds: float
    cpu_system_seconds: float
    cpus_allocated: float
    mem_rss_bytes: int
    mem_limit_bytes: int
    disk_used_bytes: int
    disk_allocated_bytes: int
    source: str
    timestamp: float
    def __init__(self, framework_id: _Optional[str] = ..., task_id: _Optional[str] = ..., cpu_user_seconds: _Optional[float] = ..., cpu_system_seconds: _Optional[float] = ..., cpus_allocated: _Optional[float] = ..., mem_rss_bytes: _Optional[int] = ..., mem_limit_bytes: _Optional[int] = ..., disk_used_bytes: _Optional[int] = ..., disk_allocated_bytes: _Optional[int] = ..., source: _Optional[str] = ..., timestamp: _Optional[float] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("usage",)
    USAGE_FIELD_NUMBER: _ClassVar[int]
    usage: _containers.RepeatedCompositeFieldContainer[TaskUsage]
    def __init__(self, usage: _Optional[_Iterable[_Union[TaskUsage, _Mapping]]] = ...) -> None: ...
