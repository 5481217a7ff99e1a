"""The AgentLink gRPC service: one bidirectional stream per agent."""

from __future__ import annotations

import asyncio

import grpc
import structlog

from agora.common.addresses import loopback_advertised, peer_host
from agora.common.batches import master_batches
from agora.common.credentials import caller_principal
from agora.common.failures import Recently
from agora.common.rpc import read_first
from agora.master import limits
from agora.master.authz import Action, Gatekeeper
from agora.master.core import MasterCore
from agora.master.errors import CallError, abort
from agora.master.registry import Agent, Session
from agora.v1 import agent_link_pb2_grpc

log = structlog.get_logger(__name__)


def on_agent_message(core: MasterCore, agent: Agent, message) -> None:
    """A registered agent's message, from its stream or carried by a relay."""
    kind = message.WhichOneof("message")
    if kind == "batch":
        core.agents.heartbeat(agent, 0.0)  # any message is evidence the agent is there
        for inner in message.batch.messages:
            inner_kind = inner.WhichOneof("message")
            if inner_kind == "batch":
                log.warning("agent sent a Batch inside a Batch; ignored", agent_id=agent.agent_id)
            elif inner_kind == "heartbeat":
                core.agents.heartbeat(agent, inner.heartbeat.timestamp)
            else:
                _on_one(core, agent, inner, inner_kind)
        return
    # A heartbeat also says when it was sent.
    core.agents.heartbeat(agent, message.heartbeat.timestamp if kind == "heartbeat" else 0.0)
    _on_one(core, agent, message, kind)


def _on_one(core: MasterCore, agent: Agent, message, kind: str | None) -> None:
    if kind == "status_update":
        core.tasks.status_update(agent, message.status_update)
    elif kind == "register":
        log.warning("agent sent Register twice on one stream; ignored", agent_id=agent.agent_id)


class AgentLinkService(agent_link_pb2_grpc.AgentLinkServicer):
    def __init__(self, core: MasterCore, gate: Gatekeeper | None = None) -> None:
        self.core = core
        self.gate = gate or Gatekeeper()
        self._refusals_said = Recently()

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        # One coroutine per agent and nothing else while it is idle: it reads here, and what
        # the master sends is written by the session from a task made only while there is
        # something to write (Session.push_to).
        # The first message must be Register; a silent or confused peer is refused at once.
        first = await read_first(context, self.core.config.agent_timeout_seconds)
        if first is grpc.aio.EOF:
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
            self.check_address(context.peer(), first.register.info)
            self.gate.check(principal, Action.REGISTER_AGENT, first.register.info.agent_id)
            agent = self.core.agents.register(first.register, session, principal)
        except CallError as e:
            await abort(context, e)
        batches = first.register.accepts_batches
        del first  # the Register's protobuf arena would stay for the stream's life
        try:
            await session.push_to(context.write)  # Registered (or a Shutdown) first, alone
            if batches:
                session.batcher = master_batches()
            if agent is not None:
                await self._read(agent, session, context)
            await session.drain()  # what was sent before the session closed (a Shutdown)
        finally:
            session.stop_writing()
            session.owner = None  # no task <-> frame cycle left for the (frozen) collector
            if agent is not None:
                self.core.agents.disconnected(agent, session)

    def check_address(self, peer: str, info) -> None:
        """Refuses an agent on another machine that advertises loopback (FAILED_PRECONDITION,
        naming --host/--advertise-ip): clients would be sent to their own machine for its task
        logs. Said in the log once a minute per agent and address."""
        why = loopback_advertised(peer, info.address)
        if why is None:
            return
        if self._refusals_said.say((peer_host(peer), info.address)) is not None:
            log.warning(
                "agent refused: it advertises a loopback address from another machine",
                peer=peer_host(peer),
                address=info.address,
                hostname=info.hostname,
                agent_id=info.agent_id or "(new)",
            )
        raise CallError(grpc.StatusCode.FAILED_PRECONDITION, why)

    async def _read(self, agent: Agent, session: Session, context) -> None:
        """Reads the agent's messages until the stream or the session ends."""
        try:
            while not session.closed:
                session.reading = True
                try:
                    message = await context.read()
                finally:
                    session.reading = False
                if message is grpc.aio.EOF or session.closed:
                    break
                on_agent_message(self.core, agent, message)
                del message  # not held (with its protobuf arena) while waiting for the next
                if self.core.offers.allocate_if_quiet():
                    # A task ended and its resources were offered at once: the frameworks'
                    # writers go first, before this stream's next read is set up.
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            if not session.ending:
                raise  # the stream was cut (overflow) or the server is stopping
            if session.owner is not None:  # the session closed: end the call normally
                session.owner.uncancel()
        except Exception as e:  # the peer vanished mid-stream: same as a clean disconnect
            log.info("agent stream broke", agent_id=agent.agent_id, error=repr(e))
        finally:
            session.close()
