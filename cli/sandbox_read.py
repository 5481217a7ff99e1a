"""Printing a task's stdout or stderr, read from its agent: `agora job logs`, `agora task logs`
and `agora app logs` all end here."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from agora.cli.errors import CommandError, unreachable

CALL_TIMEOUT = 10.0


@dataclass(frozen=True)
class TaskPlace:
    """Where a task's sandbox is: its framework, its id, and the agent that has it."""

    framework_id: str
    task_id: str
    agent_address: str
    agent_name: str  # for messages: the agent's hostname or id


def current_agent(args, credentials, agent_id: str) -> tuple[str, str] | None:
    """(address, name) of agent `agent_id` as the master knows it now, or None when the master
    cannot say (it is down, or has forgotten the agent): an agent that registered again with
    another address is read where it is now, not where it was when its task was launched."""
    import grpc

    from agora.cli.options import master_address
    from agora.common.credentials import sync_channel
    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.v1 import operator_pb2, operator_pb2_grpc

    if not agent_id:
        return None
    try:
        master = master_address(args)
        with sync_channel(master, credentials, CHANNEL_OPTIONS) as channel:
            agents = (
                operator_pb2_grpc.OperatorStub(channel)
                .ListAgents(operator_pb2.ListAgentsRequest(), timeout=CALL_TIMEOUT)
                .agents
            )
    except (CommandError, grpc.RpcError):
        return None
    for agent in agents:
        if agent.info.agent_id == agent_id and agent.info.address:
            return agent.info.address, agent.info.hostname or agent_id
    return None


def find_task(master: str, credentials, task_id: str, framework: str = "") -> TaskPlace:
    """The task `task_id` (of `framework`, an id or a name, when given) as the master knows it,
    running or recently ended; a one-line CommandError when there is none or several."""
    import grpc

    from agora.common.credentials import sync_channel
    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.v1 import operator_pb2, operator_pb2_grpc

    try:
        with sync_channel(master, credentials, CHANNEL_OPTIONS) as channel:
            ops = operator_pb2_grpc.OperatorStub(channel)
            frameworks = ops.ListFrameworks(
                operator_pb2.ListFrameworksRequest(), timeout=CALL_TIMEOUT
            ).frameworks
            tasks = ops.ListTasks(operator_pb2.ListTasksRequest(), timeout=CALL_TIMEOUT).tasks
            agents = ops.ListAgents(operator_pb2.ListAgentsRequest(), timeout=CALL_TIMEOUT).agents
    except grpc.RpcError as e:
        raise unreachable(e, master, credentials, service="Operator") from None
    # Torn-down frameworks are no longer listed: their ended tasks still carry the name.
    names = {t.framework_id: t.framework_name for t in tasks if t.framework_name}
    names.update({f.info.framework_id: f.info.name for f in frameworks if f.info.name})
    found = [
        t
        for t in tasks
        if t.task_id == task_id
        and (not framework or framework in (t.framework_id, names.get(t.framework_id)))
    ]
    if not found:
        where = f" of framework {framework!r}" if framework else ""
        raise CommandError(
            f"the master knows no task {task_id!r}{where} (`agora cluster tasks` lists them)"
        )
    if len({t.framework_id for t in found}) > 1:
        which = ", ".join(
            sorted(f"{names.get(t.framework_id) or '?'} ({t.framework_id})" for t in found)
        )
        raise CommandError(f"task {task_id!r} is in several frameworks ({which}): give --framework")
    task = found[-1]
    agent = next((a for a in agents if a.info.agent_id == task.agent_id), None)
    if agent is None or not agent.info.address:
        raise CommandError(
            f"the agent of task {task_id} ({task.agent_id}) is gone from the cluster, and its "
            "sandbox with it"
        )
    return TaskPlace(
        task.framework_id,
        task.task_id,
        agent.info.address,
        agent.info.hostname or agent.info.agent_id,
    )


def print_file(place: TaskPlace, credentials, stderr: bool = False, follow: bool = False) -> int:
    """Prints the task's stdout (or stderr); `follow`: keeps printing until the task ends."""
    import grpc

    from agora.common.credentials import sync_channel
    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.v1 import agent_pb2, agent_pb2_grpc

    path = "stderr" if stderr else "stdout"
    request = agent_pb2.ReadFileRequest(
        framework_id=place.framework_id, task_id=place.task_id, path=path
    )
    out = sys.stdout
    try:
        with sync_channel(place.agent_address, credentials, CHANNEL_OPTIONS) as channel:
            agent = agent_pb2_grpc.AgentStub(channel)
            if follow:
                for chunk in agent.FollowFile(request):
                    out.write(chunk.data.decode(errors="replace"))
                    out.flush()
                return 0
            offset = 0
            while True:
                request.offset = offset
                reply = agent.ReadFile(request, timeout=CALL_TIMEOUT)
                out.write(reply.data.decode(errors="replace"))
                offset = reply.offset + len(reply.data)
                if not reply.data or offset >= reply.size:
                    break
            out.flush()
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            why = e.details() or e.code().name
        else:
            why = str(
                unreachable(e, place.agent_address, credentials, what="the agent", service="Agent")
            )
        raise CommandError(
            f"reading {path} of {place.task_id} from agent {place.agent_name} "
            f"({place.agent_address}): {why}"
        ) from None
    return 0
