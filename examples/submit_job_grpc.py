"""submit_job_grpc: submit a batch job and watch it to the end with nothing but grpcio.

No Agora SDK here: only the stubs generated from protos/agora/v1/*.proto, to show that any gRPC
client (in any language) can do the same. The steps:

1. Ask the master's Operator service for its frameworks; the one named "batch" publishes the
   address of its Batch API in FrameworkInfo.service_address.
2. Batch.SubmitJob with a JobSpec: a command, resources per instance, instances, retries.
3. Batch.WatchJob streams the job after every change until it has ended.

    .venv/bin/python examples/submit_job_grpc.py --master 127.0.0.1:5050 --instances 3 \\
        -- echo hello from instance '$AGORA_INSTANCE'

Exits 0 if the job SUCCEEDED, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc

try:
    from agora.v1 import batch_pb2, batch_pb2_grpc, common_pb2, operator_pb2, operator_pb2_grpc
except ImportError:  # run from a checkout without installing: use the generated modules there
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protos"))
    from agora.v1 import batch_pb2, batch_pb2_grpc, common_pb2, operator_pb2, operator_pb2_grpc


def find_batch(master: str) -> str:
    """The Batch API's address, as the batch framework published it to the master."""
    with grpc.insecure_channel(master) as channel:
        operator = operator_pb2_grpc.OperatorStub(channel)
        reply = operator.ListFrameworks(operator_pb2.ListFrameworksRequest(), timeout=10)
    for framework in sorted(reply.frameworks, key=lambda f: not f.connected):
        if framework.info.name == "batch" and framework.info.service_address:
            return framework.info.service_address
    raise SystemExit(f"no batch framework is registered with the master at {master}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default=os.environ.get("AGORA_MASTER", "127.0.0.1:5050"))
    parser.add_argument("--name", default="grpc-example")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--cpus", type=float, default=0.1)
    parser.add_argument("--mem", type=float, default=32, help="MB per instance")
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="after --: the command (one argument runs in /bin/sh -c)",
    )
    args = parser.parse_args(argv)
    command = [c for c in args.command if c != "--"] or ["echo hello from $AGORA_INSTANCE"]

    address = find_batch(args.master)
    print(f"batch API at {address}", flush=True)
    with grpc.insecure_channel(address) as channel:
        batch = batch_pb2_grpc.BatchStub(channel)
        info = (
            common_pb2.CommandInfo(shell=command[0])
            if len(command) == 1
            else common_pb2.CommandInfo(argv=command)
        )
        spec = batch_pb2.JobSpec(
            name=args.name,
            instances=args.instances,
            max_retries=args.retries,
            task=batch_pb2.TaskTemplate(command=info, cpus=args.cpus, mem=args.mem),
        )
        try:
            submitted = batch.SubmitJob(batch_pb2.SubmitJobRequest(spec=spec), timeout=15)
        except grpc.RpcError as e:
            print(f"submit refused: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        print(f"submitted {submitted.job_id}", flush=True)

        job = submitted.job
        for event in batch.WatchJob(batch_pb2.WatchJobRequest(job_id=submitted.job_id)):
            job = event.job
            counts = job.counts
            state = batch_pb2.JobState.Name(job.state).removeprefix("JOB_")
            print(
                f"[{state}] {counts.succeeded}/{job.spec.instances} done, "
                f"{counts.running} running, {counts.failed} failed: {event.description}",
                flush=True,
            )

    state = batch_pb2.JobState.Name(job.state).removeprefix("JOB_")
    print(f"job {job.job_id} {state}", flush=True)
    return 0 if job.state == batch_pb2.JOB_SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
