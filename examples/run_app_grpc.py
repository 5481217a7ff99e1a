"""run_app_grpc: run a long-lived app and follow its endpoints with nothing but grpcio.

No Agora SDK here: only the stubs generated from protos/agora/v1/*.proto, to show that any gRPC
client (in any language) can do the same. The steps:

1. Ask the master's Operator service for its frameworks; the one named "services" publishes the
   address of its Services API in FrameworkInfo.service_address.
2. Services.PutApp with an App: N instances of `python3 -m http.server $PORT0`, one port each,
   and an HTTP health check the agents run next to each instance.
3. Services.WatchEndpoints streams the healthy instances' host:port after every change; the
   script prints them until N are healthy (or, with --follow, until Ctrl-C).

    .venv/bin/python examples/run_app_grpc.py --master 127.0.0.1:5050 --instances 3

Then `agora app endpoints hello-web` or `curl http://HOST:PORT/` on any printed endpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc

try:
    from agora.v1 import (
        common_pb2,
        operator_pb2,
        operator_pb2_grpc,
        services_pb2,
        services_pb2_grpc,
    )
except ImportError:  # run from a checkout without installing: use the generated modules there
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protos"))
    from agora.v1 import (
        common_pb2,
        operator_pb2,
        operator_pb2_grpc,
        services_pb2,
        services_pb2_grpc,
    )


def find_services(master: str) -> str:
    """The Services API's address, as the service framework published it to the master."""
    with grpc.insecure_channel(master) as channel:
        operator = operator_pb2_grpc.OperatorStub(channel)
        reply = operator.ListFrameworks(operator_pb2.ListFrameworksRequest(), timeout=10)
    for framework in sorted(reply.frameworks, key=lambda f: not f.connected):
        if framework.info.name == "services" and framework.info.service_address:
            return framework.info.service_address
    raise SystemExit(f"no 'services' framework at {master}: start `agora services` first")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default=os.environ.get("AGORA_MASTER", "127.0.0.1:5050"))
    parser.add_argument("--id", default="hello-web", help="app id (default hello-web)")
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument(
        "--follow", action="store_true", help="keep printing endpoint changes until Ctrl-C"
    )
    args = parser.parse_args(argv)

    app = services_pb2.App(
        id=args.id,
        cmd="exec python3 -m http.server $PORT0",
        instances=args.instances,
        cpus=0.1,
        mem=64,
        ports=1,
        health_check=common_pb2.HealthCheck(
            http=common_pb2.HttpCheck(port_index=0, path="/"),
            grace_period_seconds=30,
            interval_seconds=1,
            timeout_seconds=2,
            max_consecutive_failures=3,
        ),
    )
    with grpc.insecure_channel(find_services(args.master)) as channel:
        services = services_pb2_grpc.ServicesStub(channel)
        try:
            reply = services.PutApp(services_pb2.PutAppRequest(app=app), timeout=30)
        except grpc.RpcError as e:
            print(f"PutApp failed: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        print(
            f"app {reply.app.id} {'created' if reply.created else 'updated'}, "
            f"version {reply.app.version}",
            flush=True,
        )
        watch = services_pb2.WatchEndpointsRequest(app_id=args.id)
        try:
            for endpoints in services.WatchEndpoints(watch):
                hosts = [f"{e.host}:{e.ports[0]}" for e in endpoints.endpoints]
                print(f"{len(hosts)}/{endpoints.instances} healthy: {' '.join(hosts)}", flush=True)
                if len(hosts) == endpoints.instances and not args.follow:
                    return 0
        except KeyboardInterrupt:
            return 130
        except grpc.RpcError as e:
            print(f"watch ended: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    return 1  # the app was deleted while we watched


if __name__ == "__main__":
    sys.exit(main())
