"""The services every Agora daemon serves for generic tools: gRPC health and reflection.

Server-side only, and apart from agora.common.rpc so that clients (every `agora` command)
never load grpcio-health-checking and grpcio-reflection; daemons reach it through
`agora.common.rpc.add_standard_services`.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

__all__ = ["REFLECTION_V1", "add_standard_services"]

REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


class _ReflectionServicer(reflection.aio.ReflectionServicer):
    """grpcio-reflection's servicer, also resolving method names (`agora.v1.Batch.SubmitJob`).

    Its descriptor pool lookup finds messages and services but not methods (grpc/grpc#34743),
    so `grpcurl describe SERVICE.METHOD` and tools that start from a method failed.
    """

    def _file_containing_symbol(self, request, fully_qualified_name):
        try:
            method = self._pool.FindMethodByName(fully_qualified_name)
        except KeyError:
            pass
        else:  # the method's file is its service's
            fully_qualified_name = method.containing_service.full_name
        return super()._file_containing_symbol(request, fully_qualified_name)


def add_standard_services(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serves grpc.health.v1 (every service SERVING) and reflection, for generic tools.

    Reflection is served as v1alpha and as v1, which current tools (grpcurl, grpcui, Postman)
    try first. The two versions' messages are the same on the wire, so v1 is the same servicer
    under v1's service name (grpcio-reflection ships only v1alpha).
    """
    health_servicer = health.aio.HealthServicer()
    names = list(service_names)
    for name in ["", *names]:
        _run_now(health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    servicer = _ReflectionServicer([*names, health.SERVICE_NAME, reflection.SERVICE_NAME])
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in (reflection.SERVICE_NAME, REFLECTION_V1):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )


def _run_now(coroutine) -> None:
    """Runs a coroutine that never suspends, from sync code. The aio HealthServicer's `set` is
    async but only awaits when someone watches; a fresh servicer has no watchers yet."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise RuntimeError("coroutine suspended; call it from async code instead")
