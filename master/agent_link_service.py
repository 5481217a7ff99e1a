"""The AgentLink gRPC service: one bidirectional stream per agent."""

from __future__ import annotations

import asyncio

import grpc
import structlog

from agora.common.credentials import caller_principal
from agora.master import limits
from agora.master.authz import Action, Gatekeeper
from agora.master.core import MasterCore
from agora.master.errors import CallError, abort
from agora.master.registry import Agent, Session
from agora.v1 import agent_link_pb2_grpc

log = structlog.get_logger(__name__)


class AgentLinkService(agent_link_pb2_grpc.AgentLinkServicer):
    def __init__(self, core: MasterCore, gate: Gatekeeper | None = None) -> None:
        self.core = core
        self.gate = gate or Gatekeeper()

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        # The first message must be Register; a silent or confused peer is refused at once.
        timeout = self.core.config.agent_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                first = await anext(aiter(request_iterator))
        except (StopAsyncIteration, TimeoutError):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "send Register as the first message on the stream"
            )
        if first.WhichOneof("message") != "register":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first message must be Register, got {first.WhichOneof('message')}",
            )
        session = Session(self.core.config.max_send_queue)
        session.owner = asyncio.current_task()
        principal = caller_principal(context)
        try:
            limits.check_register_size(first.register)
            self.gate.check(principal, Action.REGISTER_AGENT, first.register.info.agent_id)
            agent = self.core.agents.register(first.register, session, principal)
        except CallError as e:
            await abort(context, e)
        reader = asyncio.create_task(self._read(agent, session, request_iterator))
        try:
            while True:
                message = await session.queue.get()
                if message is None:
                    break
                await context.write(message)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if agent is not None:
                self.core.agents.disconnected(agent, session)

    async def _read(self, agent: Agent | None, session: Session, request_iterator) -> None:
        try:
            async for message in request_iterator:
                if agent is None or session.closed:
                    break
                kind = message.WhichOneof("message")
                self.core.agents.heartbeat(
                    agent, message.heartbeat.timestamp if kind == "heartbeat" else 0.0
                )
                if kind == "status_update":
                    self.core.tasks.status_update(agent, message.status_update)
                elif kind == "register":
                    log.warning(
                        "agent sent Register twice on one stream; ignored", agent_id=agent.agent_id
                    )
        except asyncio.CancelledError:
            pass
        except Exception as e:  # the peer vanished mid-stream: same as a clean disconnect
            log.info("agent stream broke", agent_id=agent.agent_id if agent else "", error=repr(e))
        finally:
            session.close()
