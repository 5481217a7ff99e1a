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
