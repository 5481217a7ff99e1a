"""The committed generated modules must match the .proto files (run `make protos`)."""

import filecmp
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos"


def test_generated_modules_are_fresh(tmp_path):
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.glob("agora/v1/*.proto"))
    assert protos, "no .proto files found"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(PROTO_DIR),
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *protos,
        ],
        check=True,
        cwd=PROTO_DIR,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated
    stale = [
        str(rel)
        for rel in generated
        if not (PROTO_DIR / rel).exists()
        or not filecmp.cmp(tmp_path / rel, PROTO_DIR / rel, shallow=False)
    ]
    assert not stale, f"generated modules are stale, run `make protos`: {stale}"


def test_every_service_is_importable():
    from agora.v1 import agent_link_pb2_grpc, agent_pb2_grpc, operator_pb2_grpc, scheduler_pb2_grpc

    assert scheduler_pb2_grpc.SchedulerStub and agent_link_pb2_grpc.AgentLinkStub
    assert agent_pb2_grpc.AgentStub and operator_pb2_grpc.OperatorStub
