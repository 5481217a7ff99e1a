"""The AgentRelay gRPC service: many agents' links carried on one stream by a relay.

A relay (`agora relay`, agora.agent.relay) serves AgentLink to agents and carries them here on
one Carry stream, so the master pays for one gRPC stream per relay instead of one per agent.
Each carried agent gets a `RelayedSession`, which the core uses exactly as a direct stream's
Session (send, close, closed): registration, heartbeats, status updates, removal and failover
are the same code. What the master sends waits in one list per Carry stream (`Downlink`) and
goes out in batches, written by a task that exists only while there is something to write.
"""

from __future__ import annotations

import asyncio

import grpc
import structlog

from agora.common.batches import next_batch
from agora.common.credentials import caller_principal
from agora.common.errors import Reason
from agora.master import limits
from agora.master.agent_link_service import on_agent_message
from agora.master.authz import Action, AllowAll, Gatekeeper
from agora.master.core import MasterCore
from agora.master.errors import CallError, abort, status_details
from agora.master.registry import Agent
from agora.master.turns import Turns
from agora.v1 import agent_relay_pb2, agent_relay_pb2_grpc

log = structlog.get_logger(__name__)

RelayDown = agent_relay_pb2.RelayDown


class Downlink:
    """What the master sends on one Carry stream, in order, written in batches.

    Bounded as direct sessions are, in aggregate: past `max_send_queue` items per carried link
    the relay is taken to have stopped reading, and the whole stream is cut (its handler,
    `owner`, is cancelled); the relay reconnects and its agents register again, as after any
    disconnection.
    """

    def __init__(
        self, write, owner: asyncio.Task, max_per_link: int, sessions: dict[int, RelayedSession]
    ) -> None:
        self.items: list[RelayDown.Item] = []
        self.broken = False
        self._write = write
        self._owner: asyncio.Task | None = owner
        self._max_per_link = max_per_link
        self._sessions = sessions
        self._writer: asyncio.Task | None = None

    def put(self, item: RelayDown.Item) -> None:
        if self.broken:
            return
        # The bound grows with the links carried now.
        if len(self.items) >= self._max_per_link * max(1, len(self._sessions)):
            log.warning(
                "disconnecting a relay that stopped reading its stream", queued=len(self.items)
            )
            self._cut()
            return
        self.items.append(item)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            while self.items and not self.broken:
                batch, oversized = next_batch(self.items)
                for item in oversized:
                    session = self._sessions.get(item.link)
                    if session is not None:
                        session.refuse(
                            CallError(
                                grpc.StatusCode.RESOURCE_EXHAUSTED, "message too large to relay"
                            )
                        )
                if batch:
                    await self._write(RelayDown(items=batch))
                del batch
        except Exception as e:  # noqa: BLE001 - the relay is gone: its reads end too
            log.info("relay stream write failed", error=repr(e))
            self._cut()
        finally:
            self._writer = None

    def _cut(self) -> None:
        self.broken = True
        self.items = []
        # Closed at once, as a stream's Session is on overflow: the core sends nothing more.
        for session in self._sessions.values():
            session.closed = True
        if self._owner is not None and not self._owner.done():
            self._owner.cancel()

    def stop(self) -> None:
        """The stream is over: a write under way is abandoned."""
        self.broken = True
        if self._writer is not None:
            self._writer.cancel()
        # No task <-> frame cycle left for the (frozen) collector.
        self._owner = self._write = None


class RelayedSession:
    """One agent's link inside a Carry stream: what the core needs of a Session."""

    __slots__ = ("link", "closed", "agent", "_down", "_links")

    def __init__(self, link: int, down: Downlink, links: dict[int, RelayedSession]) -> None:
        self.link = link
        self.closed = False
        self.agent: Agent | None = None
        self._down = down
        self._links = links

    def send(self, message) -> None:
        if not self.closed:
            self._down.put(RelayDown.Item(link=self.link, message=message))

    def close(self) -> None:
        """Ends the agent's stream once what was sent before has gone (the relay ends it)."""
        if not self.closed:
            self.closed = True
            self._down.put(RelayDown.Item(link=self.link, ended=RelayDown.Ended(code=0)))
            self._forget()

    def refuse(self, error: CallError) -> None:
        """Ends the agent's stream with the refusal, as `abort` ends a direct one."""
        self.closed = True
        self._down.put(
            RelayDown.Item(
                link=self.link,
                ended=RelayDown.Ended(
                    code=error.code.value[0],
                    details=error.message,
                    status_details=status_details(error),
                ),
            )
        )
        self._forget()

    def gone(self) -> None:
        """The relay says the agent's stream ended: nothing more is sent on it."""
        self.closed = True
        self._forget()

    def _forget(self) -> None:
        if self._links.get(self.link) is self:
            del self._links[self.link]


class AgentRelayService(agent_relay_pb2_grpc.AgentRelayServicer):
    def __init__(self, core: MasterCore, gate: Gatekeeper | None = None) -> None:
        self.core = core
        self.gate = gate or Gatekeeper()

    @property
    def _authenticates(self) -> bool:
        credentials = self.core.config.credentials
        return credentials.secure or credentials.tokens is not None

    def _check_relay(self, principal: str) -> None:
        if not self._authenticates and isinstance(self.gate.authorizer, AllowAll):
            # Nobody is authenticated and everything is allowed: a relay that names no one
            # (see _open) can do nothing a direct caller of AgentLink could not.
            return
        self.gate.check(principal, Action.RELAY_AGENTS, "")

    async def Carry(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        try:
            self._check_relay(caller_principal(context))
        except CallError as e:
            await abort(context, e)
        owner = asyncio.current_task()
        assert owner is not None
        links: dict[int, RelayedSession] = {}
        down = Downlink(context.write, owner, self.core.config.max_send_queue, links)
        # Accepted: the relay now takes agents, and knows which leader it carries them to.
        await context.write(RelayDown(epoch=self.core.epoch))
        # Links are numbered upwards: a number at or below the highest seen that is not open
        # was ended here, and what the agent said after that is dropped.
        highest = 0
        try:
            while True:
                batch = await context.read()
                if batch is grpc.aio.EOF:
                    break
                turns = Turns()  # a batch of thousands does not stall the loop
                for item in batch.items:
                    try:
                        if item.link > highest:
                            highest = item.link
                            self._open(item, down, links)
                        else:
                            self._carry(item, links)
                    except Exception:  # noqa: BLE001 - one agent's fault ends its link only
                        log.exception("failed to handle a relayed agent's message")
                        self._drop(item.link, down, links)
                    if turns.due():
                        await turns.take()
                self.core.offers.allocate_if_quiet()
                batch = item = None  # not held (with its protobuf arena) while waiting
        # A CancelledError (the server stopping, or Downlink cutting a relay that stopped
        # reading) goes through: the relay sees the stream end and reconnects.
        except Exception as e:  # noqa: BLE001 - the relay vanished: as many disconnections
            log.info("relay stream broke", error=repr(e))
        finally:
            down.stop()
            for session in list(links.values()):
                session.gone()
                if session.agent is not None:
                    self.core.agents.disconnected(session.agent, session)  # type: ignore[arg-type]

    def _drop(self, link: int, down: Downlink, links: dict[int, RelayedSession]) -> None:
        """Ends one link after the master failed on its message (a bug: logged)."""
        session = links.get(link) or RelayedSession(link, down, links)
        session.refuse(CallError(grpc.StatusCode.INTERNAL, "the master failed to handle a message"))
        if session.agent is not None:
            self.core.agents.disconnected(session.agent, session)  # type: ignore[arg-type]

    def _open(self, item, down: Downlink, links: dict[int, RelayedSession]) -> None:
        """A link's first item: a Register, registered as on a direct stream."""
        session = RelayedSession(item.link, down, links)
        if item.WhichOneof("what") != "message":
            session.gone()  # closed before it said anything
            return
        message = item.message
        kind = message.WhichOneof("message")
        try:
            if self.core.agents.stopping:
                raise CallError(
                    grpc.StatusCode.UNAVAILABLE,
                    "the master is stopping; dial again",
                    Reason.UNAVAILABLE,
                )
            if item.principal and not self._authenticates:
                raise CallError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "this master authenticates no one, so a relay may not name an agent's "
                    "principal: give the master TLS or --tokens, or run the relay without them",
                    Reason.PERMISSION_DENIED,
                )
            if kind != "register":
                raise CallError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the first message must be Register, got {kind}",
                    Reason.INVALID_REQUEST,
                )
            limits.check_text("principal", item.principal, limits.MAX_NAME_LENGTH)
            limits.check_register_size(message.register)
            self.gate.check(item.principal, Action.REGISTER_AGENT, message.register.info.agent_id)
            links[item.link] = session
            agent = self.core.agents.register(message.register, session, item.principal)  # type: ignore[arg-type]
        except CallError as e:
            session.refuse(e)
            return
        if agent is None:  # told to shut down; the session is closed already
            return
        session.agent = agent

    def _carry(self, item, links: dict[int, RelayedSession]) -> None:
        session = links.get(item.link)
        if session is None or session.agent is None:
            return  # ended here already: the agent's last words
        agent = session.agent
        if item.WhichOneof("what") == "closed":
            session.gone()
            self.core.agents.disconnected(agent, session)  # type: ignore[arg-type]
            return
        on_agent_message(self.core, agent, item.message)
