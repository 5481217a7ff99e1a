"""Server reflection answers generic tools in both versions, down to method names."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from agora.common.rpc import add_standard_services, bind, new_server, service_name
from agora.v1 import batch_pb2

BATCH = service_name(batch_pb2, "Batch")


@pytest.fixture
async def address():
    server = new_server()
    add_standard_services(server, [BATCH])
    port = bind(server, "127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(0)


async def ask(address: str, version: str, **request) -> reflection_pb2.ServerReflectionResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        replies = [r async for r in call(iter([reflection_pb2.ServerReflectionRequest(**request)]))]
    assert len(replies) == 1
    return replies[0]


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_lists_services_and_describes_a_method(address, version):
    listed = await ask(address, version, list_services="")
    assert BATCH in {s.name for s in listed.list_services_response.service}
    # `grpcurl describe agora.v1.Batch.SubmitJob`: the file that defines the method.
    reply = await ask(address, version, file_containing_symbol=f"{BATCH}.SubmitJob")
    assert not reply.HasField("error_response"), reply.error_response
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in reply.file_descriptor_response.file_descriptor_proto
    ]
    batch = next(f for f in files if f.name == "agora/v1/batch.proto")
    [service] = [s for s in batch.service if s.name == "Batch"]
    assert "SubmitJob" in {m.name for m in service.method}
    missing = await ask(address, version, file_containing_symbol="agora.v1.Batch.NoSuchMethod")
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
