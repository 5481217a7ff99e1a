"""Every Agora server answers generic gRPC tools: grpc.health.v1 and server reflection."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from harness import ROOT, Daemon, eventually

pytestmark = pytest.mark.e2e


def reflected_services(address: str) -> set[str]:
    """What `grpcurl ADDRESS list` would print."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [reply] = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    return {s.name for s in reply.list_services_response.service}


def health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status


def test_every_server_serves_health_and_reflection(tmp_path):
    local = Daemon(
        ["local", "--port", "0", "--agents", "1", "--work-dir", str(tmp_path / "w")],
        tmp_path / "local.log",
    ).start(timeout=60)
    try:
        eventually(
            lambda: any("services listening on" in line for line in local.lines),
            timeout=30,
            message="the frameworks to start",
        )
        addresses = {}
        for line in local.lines:
            match = re.match(r"(\w+) listening on (\S+)", line)
            if match:
                addresses[match.group(1)] = match.group(2)
        agents = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "agora.cli.main",
                    "cluster",
                    "agents",
                    "--json",
                    "--master",
                    addresses["master"],
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        addresses["agent"] = agents[0]["address"]

        expected = {
            "master": {"agora.v1.Scheduler", "agora.v1.AgentLink", "agora.v1.Operator"},
            "agent": {"agora.v1.Agent"},
            "batch": {"agora.v1.Batch"},
            "services": {"agora.v1.Services"},
        }
        for server, services in expected.items():
            listed = reflected_services(addresses[server])
            assert services | {"grpc.health.v1.Health"} <= listed, (server, listed)
            for service in ["", *services]:
                assert (
                    health(addresses[server], service) == health_pb2.HealthCheckResponse.SERVING
                ), (server, service)
    finally:
        local.stop()
