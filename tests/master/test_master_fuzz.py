"""Every RPC of a real master, fed random and oversized values (hypothesis): each answer is a
proper status (never UNKNOWN or INTERNAL, which would be an unhandled error), and the master
keeps serving. The messages are built from the protos' own descriptors, so a new RPC or field
is covered without editing this test."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from harness import Daemon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agora.common.rpc import CHANNEL_OPTIONS
from agora.v1 import (
    agent_link_pb2,
    agent_link_pb2_grpc,
    operator_pb2,
    operator_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

pytestmark = pytest.mark.e2e

# What a master may answer to nonsense: refusals, never a crash.
PROPER = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE,  # e.g. "agent not re-registered yet, retry"
    grpc.StatusCode.DEADLINE_EXCEEDED,  # a stream that waits for more (Subscribe, Connect)
    grpc.StatusCode.UNIMPLEMENTED,  # a Call on the Calls stream naming no call it knows
}

TEXT = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="ab-_.:/", max_size=300),
    st.integers(1_000, 200_000).map(lambda n: "x" * n),  # oversized
    st.sampled_from(["", "*", "..", "/etc/passwd", "\x00", "a" * 257, "é" * 100]),
)
NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e308, -1e308, 1e-9]),
)


def message(descriptor, depth: int = 0):
    """A strategy for messages of `descriptor` with every field random (some left unset)."""
    fields = {}
    for field in descriptor.fields:
        value = _field(field, depth)
        if value is not None:
            fields[field.name] = st.one_of(st.none(), value)

    @st.composite
    def build(draw):
        out = {}
        for name, strategy in fields.items():
            value = draw(strategy)
            if value is not None:
                out[name] = value
        return out

    return build()


def _scalar(field, depth: int):
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return TEXT
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return NUMBER
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if t in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return st.integers(-(2**31), 2**31 - 1)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return st.integers(-(2**63), 2**63 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    if t == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            return st.dictionaries(TEXT, TEXT, max_size=3)
        if depth >= 3:
            return None
        return message(field.message_type, depth + 1)
    return None


def _field(field, depth: int):
    value = _scalar(field, depth)
    if value is None:
        return None
    if field.is_repeated and not (
        field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
    ):
        # A few random ones, or a flood of plain ones (thousands of ids, tasks, labels...).
        plain = {} if field.type == FieldDescriptor.TYPE_MESSAGE else _PLAIN.get(field.type, 0)
        return st.one_of(
            st.lists(value, max_size=3),
            st.integers(500, 20_000).map(lambda n: [plain] * n),
        )
    return value


_PLAIN = {
    FieldDescriptor.TYPE_STRING: "t",
    FieldDescriptor.TYPE_BYTES: b"t",
    FieldDescriptor.TYPE_BOOL: False,
    FieldDescriptor.TYPE_DOUBLE: 0.0,
    FieldDescriptor.TYPE_FLOAT: 0.0,
}


def fill(msg, fields: dict):
    """`msg` with `fields` set, skipping values protobuf itself refuses (out of range...)."""
    for name, value in fields.items():
        field = msg.DESCRIPTOR.fields_by_name[name]
        try:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                if field.message_type.GetOptions().map_entry:
                    getattr(msg, name).update(value)
                elif field.is_repeated:
                    for item in value:
                        fill(getattr(msg, name).add(), item)
                else:
                    fill(getattr(msg, name), value)
            elif field.is_repeated:
                getattr(msg, name).extend(value)
            else:
                setattr(msg, name, value)
        except (TypeError, ValueError, OverflowError):
            continue
    return msg


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    daemon = Daemon(
        ["master", "--port", "0", "--state-dir", str(root / "m"), "--log-level", "warning"],
        root / "master.log",
    ).start()
    channel = grpc.insecure_channel(daemon.address, options=CHANNEL_OPTIONS)
    yield daemon, channel
    channel.close()
    daemon.stop()


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def unary_methods():
    for module, stub in (
        (scheduler_pb2, scheduler_pb2_grpc.SchedulerStub),
        (operator_pb2, operator_pb2_grpc.OperatorStub),
    ):
        service = next(iter(module.DESCRIPTOR.services_by_name.values()))
        for method in service.methods:
            yield pytest.param(module, stub, method, id=f"{service.name}.{method.name}")


@pytest.mark.parametrize("module,stub_class,method", list(unary_methods()))
def test_every_rpc_answers_nonsense_with_a_proper_status(master, module, stub_class, method):
    daemon, channel = master
    stub = stub_class(channel)
    request_class = getattr(module, method.input_type.name)
    streaming = method.server_streaming

    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(message(method.input_type))
    def check(fields):
        request = fill(request_class(), fields)
        call = getattr(stub, method.name)
        try:
            if method.client_streaming:  # Calls: each call's result has its own status
                for batch in call(iter([request]), timeout=5):
                    for result in batch.results:
                        if result.code:
                            code = _CODES[result.code]
                            assert code in PROPER, (method.name, code, result.message[:300])
                            assert len(result.message) < 2_000
            elif streaming:
                stream = call(request, timeout=0.5)
                next(iter(stream), None)
                stream.cancel()
            else:
                call(request, timeout=5)
        except grpc.RpcError as e:
            assert e.code() in PROPER, (method.name, e.code(), (e.details() or "")[:300])
            assert len(e.details() or "") < 2_000  # a value is never echoed back in full

    check()
    assert daemon.alive()
    operator_pb2_grpc.OperatorStub(channel).ListMasters(
        operator_pb2.ListMastersRequest(), timeout=5
    )  # and it still answers


def test_agent_link_answers_nonsense_registrations_with_a_proper_status(master):
    daemon, channel = master
    stub = agent_link_pb2_grpc.AgentLinkStub(channel)

    @settings(
        max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(message(agent_link_pb2.AgentMessage.DESCRIPTOR))
    def check(fields):
        first = fill(agent_link_pb2.AgentMessage(), fields)
        stream = stub.Connect(iter([first]), timeout=0.5)
        try:
            next(iter(stream), None)
        except grpc.RpcError as e:
            assert e.code() in PROPER, (e.code(), (e.details() or "")[:300])
        finally:
            stream.cancel()

    check()
    assert daemon.alive()
