"""`agora local`: a whole cluster in one process (master, agents, batch and services)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
from pathlib import Path

from agora.cli.errors import CommandError, UsageError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_log_flags,
    daemon_credentials,
    port_number,
    setup_logging,
)
from agora.common import Resources
from agora.common.arguments import whole_number


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "local",
        help="run a master and agents in one process (a cluster on this machine)",
        description=(
            "Starts a master and --agents agents in the foreground, each agent with its own "
            "work dir and a port range of its own, and prints the master's address. Stop with "
            "Ctrl-C: tasks are killed and the work dir is kept for inspection."
        ),
    )
    p.add_argument("--agents", type=_count, default=3, help="number of agents (default 3)")
    p.add_argument(
        "--masters",
        type=_count,
        default=1,
        help="number of masters (default 1). More than one starts a ZooKeeper server (Debian's "
        "`zookeeper` package) and the masters as processes of their own on --port, --port+1, "
        "...: one leads, the others stand by; kill -9 the leader to watch one take over "
        "(a master that exits is started again). The batch and services frameworks then run "
        "as highly available pairs too (--port+10/+11 and +12/+13)",
    )
    p.add_argument(
        "--port", type=port_number, default=5050, help="master port (default 5050; 0 = any)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="where the master's state, the frameworks' jobs and apps and the agents' sandboxes "
        f"go, kept across restarts (default {default_work_dir()})",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="empty the work dir first: no jobs, apps, agents or tasks from an earlier run",
    )
    p.add_argument(
        "--agent-resources",
        type=_resources,
        default="cpus:2;mem:2048;disk:8192",
        help="resources of each agent; ports are added per agent so they never clash "
        "(default 'cpus:2;mem:2048;disk:8192')",
    )
    p.add_argument(
        "--http-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="the web dashboard's port (default: --port + 30, so 5080; with --port 0, any)",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve the master's Prometheus metrics on PORT (0 = any) and each agent's on a "
        "free port, all printed at start (default: off)",
    )
    add_daemon_tls_flags(p)
    add_log_flags(p)
    p.set_defaults(func=_run)


# Bad values are usage errors (exit 2, one line naming the flag), as for `agora agent`.
_count = whole_number(0)


def _resources(text: str) -> Resources:
    try:
        return Resources.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


async def _start_masters(args: argparse.Namespace, work_dir: Path, http_port: int | None):
    """ZooKeeper and --masters master processes; their logs go to work_dir/master-N.log."""
    from agora.cli.local_masters import LocalMasters
    from agora.common.zookeeper_server import ZooKeeperNotInstalled

    extra = ["--log-level", args.log_level, "--log-format", args.log_format]
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        if getattr(args, flag):
            extra += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.insecure:
        extra.append("--insecure")
    masters = LocalMasters(work_dir, args.masters, args.host, args.port, http_port, extra)
    try:
        await masters.start()
    except ZooKeeperNotInstalled as e:
        raise CommandError(f"--masters needs ZooKeeper: {e}") from None
    except RuntimeError as e:
        await masters.stop()
        raise CommandError(f"cannot start the masters: {e}") from None
    return masters


def _agent_resources(resources: Resources, index: int) -> Resources:
    if not resources.port_ranges():
        first = 31000 + index * 1000
        resources = resources + Resources.parse(f"ports:[{first}-{first + 999}]")
    return resources


def _run(args: argparse.Namespace) -> int:
    if args.masters < 1:
        raise UsageError("--masters must be at least 1")
    if args.masters > 10:
        raise UsageError("--masters: at most 10 (the frameworks' pairs use --port+10 to +13)")
    if args.masters > 1 and args.port == 0:
        raise UsageError("--masters needs a fixed --port (the masters use --port, --port+1, ...)")
    setup_logging(args)
    work_dir = args.work_dir or default_work_dir()
    if args.fresh and work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    return asyncio.run(_serve(args, work_dir))


def _agora_command() -> str:
    """How this `agora` was run, as a user can type it again (.venv/bin/agora before the
    virtual environment is activated)."""
    argv0 = sys.argv[0]
    if os.path.basename(argv0) == "agora":
        relative = os.path.relpath(argv0)
        return argv0 if relative.startswith("..") else relative
    return f"{sys.executable} -m agora.cli.main"


def default_work_dir() -> Path:
    """$XDG_STATE_HOME/agora/local (~/.local/state/agora/local): one folder, reused by every
    start, so a restarted local cluster has its jobs, apps and running tasks back."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "agora" / "local"


async def _serve(args: argparse.Namespace, work_dir: Path) -> int:
    from agora.agent import AgentConfig, AgentDaemon
    from agora.master import Master, MasterConfig

    http_port = args.http_port
    if http_port is None:
        http_port = args.port + 30 if args.port else 0
    # Every daemon of the local cluster presents the same certificate.
    tls = {"credentials": daemon_credentials(args), "insecure": args.insecure}
    master = None
    masters = None
    if args.masters > 1:
        masters = await _start_masters(args, work_dir, http_port)
        master_address = masters.zk_url
    else:
        try:
            master = Master(
                MasterConfig(
                    host=args.host,
                    port=args.port,
                    state_dir=work_dir / "master",
                    http_port=http_port,
                    metrics_port=args.metrics_port,
                    **tls,
                )
            )
        except ValueError as e:
            raise UsageError(str(e)) from None
        try:
            port = await master.start()
        except OSError as e:  # e.g. the port is taken: one line, not a traceback
            raise CommandError(f"cannot start the master: {e}") from None
        master_address = f"{args.host}:{port}"
    agents = []
    for i in range(args.agents):
        agent = AgentDaemon(
            AgentConfig(
                master=master_address,
                host=args.host,
                port=0,
                resources=_agent_resources(args.agent_resources, i),
                attributes={"agent": str(i)},
                work_dir=work_dir / f"agent-{i}",
                hostname=f"local-{i}",
                metrics_port=0 if args.metrics_port is not None else None,
                **tls,
            )
        )
        await agent.start()
        agents.append(agent)
    if masters is not None:
        # A set of masters: the frameworks too run as highly available pairs of processes.
        masters.start_frameworks()
        return await _serve_set(masters, agents, work_dir, http_port, args)
    # The batch framework, after the agents so its first offers have somewhere to run; its
    # jobs persist under the work dir like the master's state.
    from agora.frameworks.batch import BatchConfig, BatchDaemon

    batch = BatchDaemon(
        BatchConfig(
            master=master_address,
            host=args.host,
            port=0,
            state_dir=work_dir / "batch",
            metrics_port=0 if args.metrics_port is not None else None,
            **tls,
        )
    )
    await batch.start()
    from agora.frameworks.service import ServicesConfig, ServicesDaemon

    services = ServicesDaemon(
        ServicesConfig(
            master=master_address,
            host=args.host,
            port=0,
            state_dir=work_dir / "services",
            metrics_port=0 if args.metrics_port is not None else None,
            **tls,
        )
    )
    await services.start()
    assert master is not None
    print(f"master listening on {master_address}", flush=True)
    print(f"batch listening on {batch.address}", flush=True)
    print(f"services listening on {services.address}", flush=True)
    print(f"dashboard on {master.http_url}/", flush=True)
    if master.metrics_url is not None:
        print(f"master metrics on {master.metrics_url}/metrics", flush=True)
    if args.metrics_port is not None:
        for agent in agents:
            print(f"agent metrics on {agent.metrics_url}/metrics", flush=True)
        print(f"batch metrics on {batch.metrics_url}/metrics", flush=True)
        print(f"services metrics on {services.metrics_url}/metrics", flush=True)
    print(
        f"{len(agents)} agents; work dir {work_dir} (kept for the next start; --fresh empties it)"
    )
    print(f"try: {_agora_command()} cluster agents --master {master_address}", flush=True)
    await _until_stopped()
    await batch.stop()  # first: it must not launch onto agents that are going away
    await services.stop()
    for agent in agents:
        await agent.stop()
    await master.stop()
    os.sync()
    return 0


async def _serve_set(masters, agents: list, work_dir: Path, http_port, args) -> int:
    """`agora local --masters N`: everything is up; say where, serve until a signal."""
    assert masters.zookeeper is not None
    print(f"zookeeper listening on {masters.zookeeper.address}", flush=True)
    for address, pid in zip(masters.addresses, masters.pids(), strict=True):
        print(f"master listening on {address} (pid {pid})", flush=True)
    print(f"masters: {masters.zk_url} (`agora cluster masters` shows the leader)", flush=True)
    for (kind, member), proc in zip(masters.frameworks, masters.framework_processes, strict=True):
        address = masters.framework_address(kind, member)
        pid = proc.pid if proc is not None else 0
        print(f"{kind} listening on {address} (pid {pid}; one of a pair, one leads)", flush=True)
    if http_port:
        print(f"dashboard on the leader: one of ports {http_port}-{http_port + args.masters - 1}")
    if args.metrics_port is not None:
        for agent in agents:
            print(f"agent metrics on {agent.metrics_url}/metrics", flush=True)
    print(
        f"{len(agents)} agents; work dir {work_dir} (kept for the next start; --fresh empties it)"
    )
    print(f"try: {_agora_command()} cluster agents --master {masters.zk_url}", flush=True)
    await _until_stopped()
    await masters.stop_frameworks()
    for agent in agents:
        await agent.stop()
    await masters.stop()
    os.sync()
    return 0


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("stopping...", flush=True)
