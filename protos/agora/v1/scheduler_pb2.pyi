from agora.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HoldState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLD_STATE_UNSPECIFIED: _ClassVar[HoldState]
    HOLD_MET: _ClassVar[HoldState]
    HOLD_EXPIRED: _ClassVar[HoldState]
    HOLD_RELEASED: _ClassVar[HoldState]
HOLD_STATE_UNSPECIFIED: HoldState
HOLD_MET: HoldState
HOLD_EXPIRED: HoldState
HOLD_RELEASED: HoldState

class SubscribeRequest(_message.Message):
    __slots__ = ("framework", "accepts_batches")
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_BATCHES_FIELD_NUMBER: _ClassVar[int]
    framework: _common_pb2.FrameworkInfo
    accepts_batches: bool
    def __init__(self, framework: _Optional[_Union[_common_pb2.FrameworkInfo, _Mapping]] = ..., accepts_batches: _Optional[bool] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("subscribed", "offers", "rescind", "update", "failure", "error", "heartbeat", "hold", "batch", "agent_drain", "preemption")
    class Subscribed(_message.Message):
        __slots__ = ("framework_id", "stream_id", "heartbeat_interval_seconds", "master_id", "master_principal", "epoch")
        FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
        STREAM_ID_FIELD_NUMBER: _ClassVar[int]
        HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
        MASTER_ID_FIELD_NUMBER: _ClassVar[int]
        MASTER_PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
        EPOCH_FIELD_NUMBER: _ClassVar[int]
        framework_id: str
        stream_id: str
        heartbeat_interval_seconds: float
        master_id: str
        master_principal: str
        epoch: int
        def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[float] = ..., master_id: _Optional[str] = ..., master_principal: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...
    class Offers(_message.Message):
        __slots__ = ("offers",)
        OFFERS_FIELD_NUMBER: _ClassVar[int]
        offers: _containers.RepeatedCompositeFieldContainer[_common_pb2.Offer]
        def __init__(self, offers: _Optional[_Iterable[_Union[_common_pb2.Offer, _Mapping]]] = ...) -> None: ...
    class Rescind(_message.Message):
        __slots__ = ("offer_id",)
        OFFER_ID_FIELD_NUMBER: _ClassVar[int]
        offer_id: str
        def __init__(self, offer_id: _Optional[str] = ...) -> None: ...
    class Update(_message.Message):
        __slots__ = ("status",)
        STATUS_FIELD_NUMBER: _ClassVar[int]
        status: _common_pb2.TaskStatus
        def __init__(self, status: _Optional[_Union[_common_pb2.TaskStatus, _Mapping]] = ...) -> None: ...
    class AgentDrain(_message.Message):
        __slots__ = ("agent_id", "draining", "deadline")
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        DRAINING_FIELD_NUMBER: _ClassVar[int]
        DEADLINE_FIELD_NUMBER: _ClassVar[int]
        agent_id: str
        draining: bool
        deadline: float
        def __init__(self, agent_id: _Optional[str] = ..., draining: _Optional[bool] = ..., deadline: _Optional[float] = ...) -> None: ...
    class PreemptionNotice(_message.Message):
        __slots__ = ("task_id", "agent_id", "message", "deadline")
        TASK_ID_FIELD_NUMBER: _ClassVar[int]
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        DEADLINE_FIELD_NUMBER: _ClassVar[int]
        task_id: str
        agent_id: str
        message: str
        deadline: float
        def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., message: _Optional[str] = ..., deadline: _Optional[float] = ...) -> None: ...
    class Failure(_message.Message):
        __slots__ = ("agent_id",)
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        agent_id: str
        def __init__(self, agent_id: _Optional[str] = ...) -> None: ...
    class Error(_message.Message):
        __slots__ = ("message",)
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        message: str
        def __init__(self, message: _Optional[str] = ...) -> None: ...
    class Heartbeat(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Batch(_message.Message):
        __slots__ = ("events",)
        EVENTS_FIELD_NUMBER: _ClassVar[int]
        events: _containers.RepeatedCompositeFieldContainer[Event]
        def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...
    class HoldUpdate(_message.Message):
        __slots__ = ("hold_id", "state", "offers", "message")
        HOLD_ID_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        OFFERS_FIELD_NUMBER: _ClassVar[int]
        MESSAGE_FIELD_NUMBER: _ClassVar[int]
        hold_id: str
        state: HoldState
        offers: _containers.RepeatedCompositeFieldContainer[_common_pb2.Offer]
        message: str
        def __init__(self, hold_id: _Optional[str] = ..., state: _Optional[_Union[HoldState, str]] = ..., offers: _Optional[_Iterable[_Union[_common_pb2.Offer, _Mapping]]] = ..., message: _Optional[str] = ...) -> None: ...
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    OFFERS_FIELD_NUMBER: _ClassVar[int]
    RESCIND_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_DRAIN_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    subscribed: Event.Subscribed
    offers: Event.Offers
    rescind: Event.Rescind
    update: Event.Update
    failure: Event.Failure
    error: Event.Error
    heartbeat: Event.Heartbeat
    hold: Event.HoldUpdate
    batch: Event.Batch
    agent_drain: Event.AgentDrain
    preemption: Event.PreemptionNotice
    def __init__(self, subscribed: _Optional[_Union[Event.Subscribed, _Mapping]] = ..., offers: _Optional[_Union[Event.Offers, _Mapping]] = ..., rescind: _Optional[_Union[Event.Rescind, _Mapping]] = ..., update: _Optional[_Union[Event.Update, _Mapping]] = ..., failure: _Optional[_Union[Event.Failure, _Mapping]] = ..., error: _Optional[_Union[Event.Error, _Mapping]] = ..., heartbeat: _Optional[_Union[Event.Heartbeat, _Mapping]] = ..., hold: _Optional[_Union[Event.HoldUpdate, _Mapping]] = ..., batch: _Optional[_Union[Event.Batch, _Mapping]] = ..., agent_drain: _Optional[_Union[Event.AgentDrain, _Mapping]] = ..., preemption: _Optional[_Union[Event.PreemptionNotice, _Mapping]] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("launch",)
    class Launch(_message.Message):
        __slots__ = ("task_infos",)
        TASK_INFOS_FIELD_NUMBER: _ClassVar[int]
        task_infos: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskInfo]
        def __init__(self, task_infos: _Optional[_Iterable[_Union[_common_pb2.TaskInfo, _Mapping]]] = ...) -> None: ...
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    launch: Operation.Launch
    def __init__(self, launch: _Optional[_Union[Operation.Launch, _Mapping]] = ...) -> None: ...

class AcceptRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "offer_ids", "operations", "filters")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    OFFER_IDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    offer_ids: _containers.RepeatedScalarFieldContainer[str]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    filters: _common_pb2.Filters
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., offer_ids: _Optional[_Iterable[str]] = ..., operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., filters: _Optional[_Union[_common_pb2.Filters, _Mapping]] = ...) -> None: ...

class AcceptResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeclineRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "offer_ids", "filters")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    OFFER_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    offer_ids: _containers.RepeatedScalarFieldContainer[str]
    filters: _common_pb2.Filters
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., offer_ids: _Optional[_Iterable[str]] = ..., filters: _Optional[_Union[_common_pb2.Filters, _Mapping]] = ...) -> None: ...

class DeclineResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReviveRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "wants")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    WANTS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    wants: Wants
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., wants: _Optional[_Union[Wants, _Mapping]] = ...) -> None: ...

class Wants(_message.Message):
    __slots__ = ("resources", "smallest")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SMALLEST_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    smallest: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    def __init__(self, resources: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., smallest: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ...) -> None: ...

class ReviveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SuppressRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ...) -> None: ...

class SuppressResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DemandRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "unmet", "priority", "wants")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    UNMET_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WANTS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    unmet: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    priority: int
    wants: Wants
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., unmet: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., priority: _Optional[int] = ..., wants: _Optional[_Union[Wants, _Mapping]] = ...) -> None: ...

class DemandResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KillRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "task_id", "agent_id", "grace_period_seconds")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    task_id: str
    agent_id: str
    grace_period_seconds: float
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., grace_period_seconds: _Optional[float] = ...) -> None: ...

class KillResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AcknowledgeRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "agent_id", "task_id", "uuid", "acknowledgements")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGEMENTS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    agent_id: str
    task_id: str
    uuid: bytes
    acknowledgements: _containers.RepeatedCompositeFieldContainer[Acknowledgement]
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., task_id: _Optional[str] = ..., uuid: _Optional[bytes] = ..., acknowledgements: _Optional[_Iterable[_Union[Acknowledgement, _Mapping]]] = ...) -> None: ...

class Acknowledgement(_message.Message):
    __slots__ = ("agent_id", "task_id", "uuid")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    task_id: str
    uuid: bytes
    def __init__(self, agent_id: _Optional[str] = ..., task_id: _Optional[str] = ..., uuid: _Optional[bytes] = ...) -> None: ...

class AcknowledgeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "tasks")
    class Task(_message.Message):
        __slots__ = ("task_id", "agent_id")
        TASK_ID_FIELD_NUMBER: _ClassVar[int]
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        task_id: str
        agent_id: str
        def __init__(self, task_id: _Optional[str] = ..., agent_id: _Optional[str] = ...) -> None: ...
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[ReconcileRequest.Task]
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[ReconcileRequest.Task, _Mapping]]] = ...) -> None: ...

class ReconcileResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TeardownRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ...) -> None: ...

class TeardownResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterViewRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ...) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("agents",)
    class AgentView(_message.Message):
        __slots__ = ("agent_id", "hostname", "attributes", "state", "total", "free", "offered", "used")
        AGENT_ID_FIELD_NUMBER: _ClassVar[int]
        HOSTNAME_FIELD_NUMBER: _ClassVar[int]
        ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        TOTAL_FIELD_NUMBER: _ClassVar[int]
        FREE_FIELD_NUMBER: _ClassVar[int]
        OFFERED_FIELD_NUMBER: _ClassVar[int]
        USED_FIELD_NUMBER: _ClassVar[int]
        agent_id: str
        hostname: str
        attributes: _containers.RepeatedCompositeFieldContainer[_common_pb2.Attribute]
        state: str
        total: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
        free: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
        offered: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
        used: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
        def __init__(self, agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., attributes: _Optional[_Iterable[_Union[_common_pb2.Attribute, _Mapping]]] = ..., state: _Optional[str] = ..., total: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., free: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., offered: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., used: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ...) -> None: ...
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[ClusterView.AgentView]
    def __init__(self, agents: _Optional[_Iterable[_Union[ClusterView.AgentView, _Mapping]]] = ...) -> None: ...

class HoldRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "count", "resources", "distinct_agents", "timeout_seconds")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_AGENTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    count: int
    resources: _containers.RepeatedCompositeFieldContainer[_common_pb2.Resource]
    distinct_agents: bool
    timeout_seconds: float
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., count: _Optional[int] = ..., resources: _Optional[_Iterable[_Union[_common_pb2.Resource, _Mapping]]] = ..., distinct_agents: _Optional[bool] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class HoldResponse(_message.Message):
    __slots__ = ("hold_id",)
    HOLD_ID_FIELD_NUMBER: _ClassVar[int]
    hold_id: str
    def __init__(self, hold_id: _Optional[str] = ...) -> None: ...

class ReleaseHoldRequest(_message.Message):
    __slots__ = ("framework_id", "stream_id", "hold_id")
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_ID_FIELD_NUMBER: _ClassVar[int]
    framework_id: str
    stream_id: str
    hold_id: str
    def __init__(self, framework_id: _Optional[str] = ..., stream_id: _Optional[str] = ..., hold_id: _Optional[str] = ...) -> None: ...

class ReleaseHoldResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Call(_message.Message):
    __slots__ = ("id", "accept", "decline", "revive", "suppress", "kill", "acknowledge", "reconcile")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    DECLINE_FIELD_NUMBER: _ClassVar[int]
    REVIVE_FIELD_NUMBER: _ClassVar[int]
    SUPPRESS_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    id: int
    accept: AcceptRequest
    decline: DeclineRequest
    revive: ReviveRequest
    suppress: SuppressRequest
    kill: KillRequest
    acknowledge: AcknowledgeRequest
    reconcile: ReconcileRequest
    def __init__(self, id: _Optional[int] = ..., accept: _Optional[_Union[AcceptRequest, _Mapping]] = ..., decline: _Optional[_Union[DeclineRequest, _Mapping]] = ..., revive: _Optional[_Union[ReviveRequest, _Mapping]] = ..., suppress: _Optional[_Union[SuppressRequest, _Mapping]] = ..., kill: _Optional[_Union[KillRequest, _Mapping]] = ..., acknowledge: _Optional[_Union[AcknowledgeRequest, _Mapping]] = ..., reconcile: _Optional[_Union[ReconcileRequest, _Mapping]] = ...) -> None: ...

class CallBatch(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ...) -> None: ...

class CallResult(_message.Message):
    __slots__ = ("id", "code", "message", "status_details")
    ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_DETAILS_FIELD_NUMBER: _ClassVar[int]
    id: int
    code: int
    message: str
    status_details: bytes
    def __init__(self, id: _Optional[int] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., status_details: _Optional[bytes] = ...) -> None: ...

class ResultBatch(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CallResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CallResult, _Mapping]]] = ...) -> None: ...
