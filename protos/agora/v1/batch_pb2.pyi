from agora.v1 import common_pb2 as _common_pb2
from agora.v1 import services_pb2 as _services_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DependencyCondition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AFTER_OK: _ClassVar[DependencyCondition]
    AFTER_ANY: _ClassVar[DependencyCondition]
    AFTER_NOT_OK: _ClassVar[DependencyCondition]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_QUEUED: _ClassVar[JobState]
    JOB_RUNNING: _ClassVar[JobState]
    JOB_SUCCEEDED: _ClassVar[JobState]
    JOB_FAILED: _ClassVar[JobState]
    JOB_KILLED: _ClassVar[JobState]
    JOB_WAITING: _ClassVar[JobState]

class InstanceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTANCE_STATE_UNSPECIFIED: _ClassVar[InstanceState]
    INSTANCE_PENDING: _ClassVar[InstanceState]
    INSTANCE_LAUNCHED: _ClassVar[InstanceState]
    INSTANCE_RUNNING: _ClassVar[InstanceState]
    INSTANCE_SUCCEEDED: _ClassVar[InstanceState]
    INSTANCE_FAILED: _ClassVar[InstanceState]
    INSTANCE_KILLED: _ClassVar[InstanceState]

class PendingReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_REASON_NONE: _ClassVar[PendingReason]
    PENDING_DEPENDENCY: _ClassVar[PendingReason]
    PENDING_PRIORITY: _ClassVar[PendingReason]
    PENDING_OWNER_SHARE: _ClassVar[PendingReason]
    PENDING_RESOURCES: _ClassVar[PendingReason]
    PENDING_CONSTRAINT: _ClassVar[PendingReason]
    PENDING_GANG: _ClassVar[PendingReason]
    PENDING_HOLD: _ClassVar[PendingReason]
    PENDING_BEGIN_TIME: _ClassVar[PendingReason]
    PENDING_RUNNING_LIMIT: _ClassVar[PendingReason]
    PENDING_RETRY_BACKOFF: _ClassVar[PendingReason]
    PENDING_MASTER: _ClassVar[PendingReason]

class ConcurrencyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONCURRENCY_ALLOW: _ClassVar[ConcurrencyPolicy]
    CONCURRENCY_FORBID: _ClassVar[ConcurrencyPolicy]
    CONCURRENCY_REPLACE: _ClassVar[ConcurrencyPolicy]
AFTER_OK: DependencyCondition
AFTER_ANY: DependencyCondition
AFTER_NOT_OK: DependencyCondition
JOB_STATE_UNSPECIFIED: JobState
JOB_QUEUED: JobState
JOB_RUNNING: JobState
JOB_SUCCEEDED: JobState
JOB_FAILED: JobState
JOB_KILLED: JobState
JOB_WAITING: JobState
INSTANCE_STATE_UNSPECIFIED: InstanceState
INSTANCE_PENDING: InstanceState
INSTANCE_LAUNCHED: InstanceState
INSTANCE_RUNNING: InstanceState
INSTANCE_SUCCEEDED: InstanceState
INSTANCE_FAILED: InstanceState
INSTANCE_KILLED: InstanceState
PENDING_REASON_NONE: PendingReason
PENDING_DEPENDENCY: PendingReason
PENDING_PRIORITY: PendingReason
PENDING_OWNER_SHARE: PendingReason
PENDING_RESOURCES: PendingReason
PENDING_CONSTRAINT: PendingReason
PENDING_GANG: PendingReason
PENDING_HOLD: PendingReason
PENDING_BEGIN_TIME: PendingReason
PENDING_RUNNING_LIMIT: PendingReason
PENDING_RETRY_BACKOFF: PendingReason
PENDING_MASTER: PendingReason
CONCURRENCY_ALLOW: ConcurrencyPolicy
CONCURRENCY_FORBID: ConcurrencyPolicy
CONCURRENCY_REPLACE: ConcurrencyPolicy

class TaskTemplate(_message.Message):
    __slots__ = ("command", "cpus", "mem", "disk", "ports", "env", "role", "kill_grace_period_seconds", "gpus", "container")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    KILL_GRACE_PERIOD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    command: _common_pb2.CommandInfo
    cpus: float
    mem: float
    disk: float
    ports: int
    env: _containers.ScalarMap[str, str]
    role: str
    kill_grace_period_seconds: float
    gpus: float
    container: _common_pb2.ContainerInfo
    def __init__(self, command: _Optional[_Union[_common_pb2.CommandInfo, _Mapping]] = ..., cpus: _Optional[float] = ..., mem: _Optional[float] = ..., disk: _Optional[float] = ..., ports: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ..., role: _Optional[str] = ..., kill_grace_period_seconds: _Optional[float] = ..., gpus: _Optional[float] = ..., container: _Optional[_Union[_common_pb2.ContainerInfo, _Mapping]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "instances", "task", "max_retries", "priority", "gang", "duration_seconds", "labels", "after", "time_limit_seconds", "max_running", "begin_at", "instance_args", "constraints", "owner", "revocable")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    BEGIN_AT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ARGS_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REVOCABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    instances: int
    task: TaskTemplate
    max_retries: int
    priority: int
    gang: bool
    duration_seconds: float
    labels: _containers.ScalarMap[str, str]
    after: _containers.RepeatedCompositeFieldContainer[Dependency]
    time_limit_seconds: float
    max_running: int
    begin_at: float
    instance_args: _containers.RepeatedScalarFieldContainer[str]
    constraints: _containers.RepeatedCompositeFieldContainer[_services_pb2.Constraint]
    owner: str
    revocable: bool
    def __init__(self, name: _Optional[str] = ..., instances: _Optional[int] = ..., task: _Optional[_Union[TaskTemplate, _Mapping]] = ..., max_retries: _Optional[int] = ..., priority: _Optional[int] = ..., gang: _Optional[bool] = ..., duration_seconds: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., after: _Optional[_Iterable[_Union[Dependency, _Mapping]]] = ..., time_limit_seconds: _Optional[float] = ..., max_running: _Optional[int] = ..., begin_at: _Optional[float] = ..., instance_args: _Optional[_Iterable[str]] = ..., constraints: _Optional[_Iterable[_Union[_services_pb2.Constraint, _Mapping]]] = ..., owner: _Optional[str] = ..., revocable: _Optional[bool] = ...) -> None: ...

class Dependency(_message.Message):
    __slots__ = ("job", "condition")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    job: str
    condition: DependencyCondition
    def __init__(self, job: _Optional[str] = ..., condition: _Optional[_Union[DependencyCondition, str]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("attempt", "task_id", "agent_id", "hostname", "agent_address", "state", "exit_code", "message", "reason", "launched_at", "started_at", "ended_at", "framework_id", "usage")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    task_id: str
    agent_id: str
    hostname: str
    agent_address: str
    state: _common_pb2.TaskState
    exit_code: int
    message: str
    reason: str
    launched_at: float
    started_at: float
    ended_at: float
    framework_id: str
    usage: _common_pb2.TaskEndUsage
    def __init__(self, attempt: _Optional[int] = ..., task_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., hostname: _Optional[str] = ..., agent_address: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., launched_at: _Optional[float] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., framework_id: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.TaskEndUsage, _Mapping]] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ("index", "state", "attempts", "not_before", "failures")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    index: int
    state: InstanceState
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    not_before: float
    failures: int
    def __init__(self, index: _Optional[int] = ..., state: _Optional[_Union[InstanceState, str]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., not_before: _Optional[float] = ..., failures: _Optional[int] = ...) -> None: ...

class InstanceCounts(_message.Message):
    __slots__ = ("pending", "running", "succeeded", "failed", "killed")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    KILLED_FIELD_NUMBER: _ClassVar[int]
    pending: int
    running: int
    succeeded: int
    failed: int
    killed: int
    def __init__(self, pending: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., killed: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "spec", "state", "instances", "submitted_at", "started_at", "ended_at", "message", "sequence", "counts", "waiting_for", "held", "pending_reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: JobSpec
    state: JobState
    instances: _containers.RepeatedCompositeFieldContainer[Instance]
    submitted_at: float
    started_at: float
    ended_at: float
    message: str
    sequence: int
    counts: InstanceCounts
    waiting_for: _containers.RepeatedScalarFieldContainer[str]
    held: bool
    pending_reason: PendingReason
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., instances: _Optional[_Iterable[_Union[Instance, _Mapping]]] = ..., submitted_at: _Optional[float] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., message: _Optional[str] = ..., sequence: _Optional[int] = ..., counts: _Optional[_Union[InstanceCounts, _Mapping]] = ..., waiting_for: _Optional[_Iterable[str]] = ..., held: _Optional[bool] = ..., pending_reason: _Optional[_Union[PendingReason, str]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id", "job")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job: Job
    def __init__(self, job_id: _Optional[str] = ..., job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("specs",)
    SPECS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    def __init__(self, specs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "include_instances", "ended_after", "owner", "limit")
    STATES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    ENDED_AFTER_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    include_instances: bool
    ended_after: float
    owner: str
    limit: int
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., include_instances: _Optional[bool] = ..., ended_after: _Optional[float] = ..., owner: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "total")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    total: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class KillJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class KillJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class HoldJobRequest(_message.Message):
    __slots__ = ("job_id", "hold")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    hold: bool
    def __init__(self, job_id: _Optional[str] = ..., hold: _Optional[bool] = ...) -> None: ...

class RequeueJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "priority", "instances", "time_limit_seconds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    priority: int
    instances: int
    time_limit_seconds: float
    def __init__(self, job_id: _Optional[str] = ..., priority: _Optional[int] = ..., instances: _Optional[int] = ..., time_limit_seconds: _Optional[float] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("timestamp", "job", "instance", "attempt", "description")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    timestamp: float
    job: Job
    instance: int
    attempt: Attempt
    description: str
    def __init__(self, timestamp: _Optional[float] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., instance: _Optional[int] = ..., attempt: _Optional[_Union[Attempt, _Mapping]] = ..., description: _Optional[str] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("name", "cron", "timezone", "concurrency", "starting_deadline_seconds", "job")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    STARTING_DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    cron: str
    timezone: str
    concurrency: ConcurrencyPolicy
    starting_deadline_seconds: float
    job: JobSpec
    def __init__(self, name: _Optional[str] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., concurrency: _Optional[_Union[ConcurrencyPolicy, str]] = ..., starting_deadline_seconds: _Optional[float] = ..., job: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class ScheduleRun(_message.Message):
    __slots__ = ("scheduled_for", "fired_at", "job_id", "skipped", "catch_up", "state", "message")
    SCHEDULED_FOR_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    scheduled_for: float
    fired_at: float
    job_id: str
    skipped: str
    catch_up: bool
    state: JobState
    message: str
    def __init__(self, scheduled_for: _Optional[float] = ..., fired_at: _Optional[float] = ..., job_id: _Optional[str] = ..., skipped: _Optional[str] = ..., catch_up: _Optional[bool] = ..., state: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("spec", "suspended", "created_at", "last_fire_time", "next_run_at", "runs", "missed")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_AT_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    spec: ScheduleSpec
    suspended: bool
    created_at: float
    last_fire_time: float
    next_run_at: float
    runs: _containers.RepeatedCompositeFieldContainer[ScheduleRun]
    missed: int
    def __init__(self, spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., suspended: _Optional[bool] = ..., created_at: _Optional[float] = ..., last_fire_time: _Optional[float] = ..., next_run_at: _Optional[float] = ..., runs: _Optional[_Iterable[_Union[ScheduleRun, _Mapping]]] = ..., missed: _Optional[int] = ...) -> None: ...

class PutScheduleRequest(_message.Message):
    __slots__ = ("spec", "replace")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    spec: ScheduleSpec
    replace: bool
    def __init__(self, spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., replace: _Optional[bool] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SuspendScheduleRequest(_message.Message):
    __slots__ = ("name", "suspended")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    name: str
    suspended: bool
    def __init__(self, name: _Optional[str] = ..., suspended: _Optional[bool] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class Owner(_message.Message):
    __slots__ = ("name", "weight", "running", "pending", "cpus", "mem", "gpus", "share")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: float
    running: int
    pending: int
    cpus: float
    mem: float
    gpus: float
    share: float
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[float] = ..., running: _Optional[int] = ..., pending: _Optional[int] = ..., cpus: _Optional[float] = ..., mem: _Optional[float] = ..., gpus: _Optional[float] = ..., share: _Optional[float] = ...) -> None: ...

class ListOwnersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListOwnersResponse(_message.Message):
    __slots__ = ("owners",)
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    owners: _containers.RepeatedCompositeFieldContainer[Owner]
    def __init__(self, owners: _Optional[_Iterable[_Union[Owner, _Mapping]]] = ...) -> None: ...

class SetOwnerWeightRequest(_message.Message):
    __slots__ = ("owner", "weight")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    owner: str
    weight: float
    def __init__(self, owner: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...
