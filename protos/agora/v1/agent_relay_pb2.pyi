from agora.v1 import agent_link_pb2 as _agent_link_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RelayUp(_message.Message):
    __slots__ = ("items",)
    class Item(_message.Message):
        __slots__ = ("link", "message", "closed", "principal")
        LINK_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        CLOSED_FIELD_NUMBER: _ClassVar[int]
        PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
        link: int
        message: _agent_link_pb2.AgentMessage
        closed: RelayUp.Closed
        principal: str
        def __init__(self, link: _Optional[int] = ..., message: _Optional[_Union[_agent_link_pb2.AgentMessage, _Mapping]] = ..., closed: _Optional[_Union[RelayUp.Closed, _Mapping]] = ..., principal: _Optional[str] = ...) -> None: ...
    class Closed(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RelayUp.Item]
    def __init__(self, items: _Optional[_Iterable[_Union[RelayUp.Item, _Mapping]]] = ...) -> None: ...

class RelayDown(_message.Message):
    __slots__ = ("items", "epoch")
    class Item(_message.Message):
        __slots__ = ("link", "message", "ended")
        LINK_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        ENDED_FIELD_NUMBER: _ClassVar[int]
        link: int
        message: _agent_link_pb2.MasterMessage
        ended: RelayDown.Ended
        def __init__(self, link: _Optional[int] = ..., message: _Optional[_Union[_agent_link_pb2.MasterMessage, _Mapping]] = ..., ended: _Optional[_Union[RelayDown.Ended, _Mapping]] = ...) -> None: ...
    class Ended(_message.Message):
        __slots__ = ("code", "details", "status_details")
        CODE_FIELD_NUMBER: _ClassVar[int]
        DETAILS_FIELD_NUMBER: _ClassVar[int]
        STATUS_DETAILS_FIELD_NUMBER: _ClassVar[int]
        code: int
        details: str
        status_details: bytes
        def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ..., status_details: _Optional[bytes] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[RelayDown.Item]
    epoch: int
    def __init__(self, items: _Optional[_Iterable[_Union[RelayDown.Item, _Mapping]]] = ..., epoch: _Optional[int] = ...) -> None: ...
