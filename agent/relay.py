"""The relay daemon (`agora relay`): a link shard between agents and the master.

Agents dial the relay as they would the master (it serves AgentLink.Connect); the relay keeps
one AgentRelay.Carry stream to the leading master and carries every agent's link on it
(agent_relay.proto). It authenticates each agent itself (the same TLS or tokens as a master)
and tells the master who the agent is; the master then treats the agent as if it had dialled
directly: the same registration, ACLs, heartbeats, reliable status updates and removal.

Failure stays simple by never hiding one. Until the relay's stream to the master is accepted,
agents are refused (UNAVAILABLE) and dial again with their own backoff; when that stream
breaks, every agent's stream is ended the same way and each agent registers again, as after a
master failover. So the master's guarantees (an agent gone is removed after the agent timeout,
status updates are resent until acknowledged) hold through the relay unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import grpc
import structlog
from google.rpc import status_pb2
from grpc_status import rpc_status

from agora.agent.link_policy import retry_delay
from agora.common.addresses import loopback_advertised
from agora.common.backoff import Backoff
from agora.common.batches import next_batch
from agora.common.credentials import (
    INSECURE,
    Credentials,
    caller_principal,
    check_listen,
    server_ssl_context,
)
from agora.common.failures import Cause, RepeatFilter, classify_error
from agora.common.http import HttpServer
from agora.common.leader import LeaderTracker, superseded
from agora.common.metrics import metrics_server
from agora.common.rpc import (
    add_standard_services,
    bind,
    describe_rpc_error,
    new_server,
    open_channel,
    read_first,
    service_name,
)
from agora.v1 import agent_link_pb2, agent_link_pb2_grpc, agent_relay_pb2, agent_relay_pb2_grpc

log = structlog.get_logger(__name__)

RelayUp = agent_relay_pb2.RelayUp
RelayDown = agent_relay_pb2.RelayDown
MasterMessage = agent_link_pb2.MasterMessage
_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True)
class RelayConfig:
    master: str  # HOST:PORT, a set, or zk://
    host: str = "127.0.0.1"
    port: int = 5053
    credentials: Credentials = INSECURE
    insecure: bool = False
    # An agent that says nothing for this long after dialling is refused (the master's own
    # limit for a Register is its agent timeout).
    register_timeout: float = 30.0
    # Messages waiting for one agent that does not read them: past this its stream is ended.
    max_queued_per_agent: int = 10_000
    # Messages waiting for the master: past this the relay stops reading its agents until the
    # master has taken some (gRPC's flow control then holds the agents, as a master's does).
    max_queued_up: int = 20_000
    # Prometheus metrics at http(s)://host:metrics_port/metrics; None: not served.
    metrics_port: int | None = None


@dataclass
class RelayCounts:
    """What the relay has carried, for its metrics (agent/relay_metrics.py)."""

    links: int = 0
    messages_up: int = 0
    batches_up: int = 0
    messages_down: int = 0
    batches_down: int = 0


class RelayLink:
    """One agent's stream at the relay: what the master sent it, waiting to be written."""

    __slots__ = ("number", "queue", "ended", "owner")

    def __init__(self, number: int, owner: asyncio.Task | None) -> None:
        self.number = number
        self.queue: asyncio.Queue = asyncio.Queue()
        self.ended = False
        self.owner = owner  # the agent's stream handler, cut if the agent stops reading

    def end(self, code: grpc.StatusCode, details: str, status_details: bytes = b"") -> None:
        if not self.ended:
            self.ended = True
            self.queue.put_nowait(
                RelayDown.Ended(code=code.value[0], details=details, status_details=status_details)
            )


class Uplink:
    """The relay's one stream to the master: links opened on it and what waits to be sent.
    (An emulated fleet carries its agents on one in the same way:
    experiments/emulated/carrier.py.)"""

    def __init__(
        self,
        call,
        max_up: int,
        max_down_per_link: int,
        counts: RelayCounts,
        linger: float = 0.0,
    ) -> None:
        self.call = call
        # Seconds the writer waits before it takes what is queued, so that messages spread in
        # time share a write. The relay lingers not at all: its writes queue under load, and
        # batch on their own.
        self._linger = linger
        self.counts = counts
        self._max_down_per_link = max_down_per_link
        self.links: dict[int, RelayLink] = {}
        self.items: list[RelayUp.Item] = []
        self.broken = False
        self._next = 0
        self._max_up = max_up
        # Set while the master keeps up: the agents' readers wait on it (backpressure).
        self.room = asyncio.Event()
        self.room.set()
        self._writer: asyncio.Task | None = None

    def open(self, principal: str, first) -> RelayLink:
        self._next += 1
        link = RelayLink(self._next, asyncio.current_task())
        self.links[link.number] = link
        self.put(RelayUp.Item(link=link.number, message=first, principal=principal))
        return link

    def put(self, item: RelayUp.Item) -> None:
        if self.broken:
            return
        self.items.append(item)
        if len(self.items) >= self._max_up:
            self.room.clear()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._pump())

    def close(self, link: RelayLink) -> None:
        """The agent's stream ended: tell the master (unless it ended the link itself)."""
        if self.links.pop(link.number, None) is not None and not link.ended:
            self.put(RelayUp.Item(link=link.number, closed=RelayUp.Closed()))

    async def _pump(self) -> None:
        try:
            if self._linger:
                await asyncio.sleep(self._linger)
            while self.items and not self.broken:
                batch, oversized = next_batch(self.items)
                for item in oversized:
                    self._refuse_oversized(item)
                if len(self.items) < self._max_up:
                    self.room.set()
                if batch:
                    self.counts.messages_up += len(batch)
                    self.counts.batches_up += 1
                    await self.call.write(RelayUp(items=batch))
                del batch
        except Exception as e:  # noqa: BLE001 - the stream broke: the reader sees it too
            log.info("write to the master failed", error=describe_rpc_error(e))
            self._fail()
        finally:
            self._writer = None

    def _refuse_oversized(self, item: RelayUp.Item) -> None:
        link = self.links.get(item.link)
        if link is not None:
            log.warning("an agent's message is too large to relay", link=item.link)
            self.close(link)
            link.end(grpc.StatusCode.RESOURCE_EXHAUSTED, "the message is too large to relay")

    def _fail(self) -> None:
        """Ends the stream to the master: its reader (Relay._carry) then ends every link."""
        self.broken = True
        self.items = []
        self.room.set()  # readers waiting for room go on (and find the uplink broken)
        self.call.cancel()

    def deliver(self, item: RelayDown.Item) -> None:
        link = self.links.get(item.link)
        if link is None or link.ended:
            return  # the agent has gone: what was meant for it is dropped, as on a broken stream
        if item.WhichOneof("what") == "ended":
            link.ended = True
            self.links.pop(link.number, None)
            link.queue.put_nowait(item.ended)
        elif link.queue.qsize() >= self._max_down_per_link:
            # The agent stopped reading (gRPC's flow control holds the writer): cut its
            # stream; it dials again and, as after any disconnection, resends what is
            # unacknowledged.
            log.warning("disconnecting an agent that stopped reading its stream", link=link.number)
            self.close(link)
            link.ended = True
            if link.owner is not None:
                link.owner.cancel()
        else:
            # A copy: a part of the batch would keep the whole batch's memory alive (upb).
            message = MasterMessage()
            message.CopyFrom(item.message)
            link.queue.put_nowait(message)

    def end_all(self, details: str) -> None:
        self.broken = True
        self.room.set()
        if self._writer is not None:
            self._writer.cancel()
        for link in self.links.values():
            link.end(grpc.StatusCode.UNAVAILABLE, details)
        self.links.clear()


class Relay(agent_link_pb2_grpc.AgentLinkServicer):
    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.tracker = LeaderTracker(config.master)
        self.port = 0
        self.carried = 0  # agents' streams open now
        self.counts = RelayCounts()
        self.connected = asyncio.Event()  # the master accepted the relay's stream
        self._up: Uplink | None = None
        self._server: grpc.aio.Server | None = None
        self._metrics: HttpServer | None = None
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._backoff = Backoff()  # 0.2 s doubling to 10 s, jittered, as every link
        self._said = RepeatFilter()

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> int:
        """Binds the agents' port and starts dialling the master; returns the bound port."""
        check_listen("the relay", self.config.host, self.config.credentials, self.config.insecure)
        server = new_server(credentials=self.config.credentials)
        agent_link_pb2_grpc.add_AgentLinkServicer_to_server(self, server)
        add_standard_services(server, [service_name(agent_link_pb2, "AgentLink")])
        self.port = bind(server, f"{self.config.host}:{self.config.port}", self.config.credentials)
        await server.start()
        self._server = server
        if self.config.metrics_port is not None:
            from agora.agent.relay_metrics import relay_registry

            credentials = self.config.credentials
            self._metrics = metrics_server(
                self.config.host,
                self.config.metrics_port,
                relay_registry(self),
                server_ssl_context(credentials) if credentials.secure else None,
            )
            await self._metrics.start()
        await self.tracker.start()
        self._task = asyncio.create_task(self._run(), name="relay-uplink")
        return self.port

    @property
    def metrics_url(self) -> str | None:
        """http(s)://host:port of /metrics, when served."""
        return self._metrics.url if self._metrics is not None else None

    def queued_up(self) -> int:
        """Agents' messages waiting to be sent to the master."""
        return len(self._up.items) if self._up is not None else 0

    async def stop(self) -> None:
        self._stopping = True
        if self._up is not None:
            self._up.end_all("the relay is stopping; dial again")
            self._up.call.cancel()
        if self._server is not None:
            await self._server.stop(1.0)
        if self._metrics is not None:
            await self._metrics.stop()
            self._metrics = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.tracker.close()

    # The agents' side -------------------------------------------------------------------

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext) -> None:
        up = self._up
        if up is None or not self.connected.is_set():
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"the relay is not linked to the master ({self.tracker}) yet; dial again",
            )
        assert up is not None  # abort raised otherwise
        first = await read_first(context, self.config.register_timeout)
        if first is grpc.aio.EOF:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "send Register as the first message on the stream"
            )
        if up.broken:  # the master went while the agent was saying hello
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "the relay lost the master; dial again"
            )
        if first.WhichOneof("message") == "register":
            why = loopback_advertised(context.peer(), first.register.info.address)
            if why is not None:  # the master sees the relay's address, not the agent's
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
        link = up.open(caller_principal(context), first)
        del first
        self.carried += 1
        reader = asyncio.create_task(self._read_agent(up, link, context))
        try:
            while True:
                message = await link.queue.get()
                if isinstance(message, RelayDown.Ended):
                    break
                await context.write(message)
            reader.cancel()
            if message.status_details:  # the master's refusal, with its reason (ErrorInfo)
                status = status_pb2.Status.FromString(message.status_details)
                await context.abort_with_status(rpc_status.to_status(status))
            if message.code != 0:
                code = _CODES.get(message.code, grpc.StatusCode.UNKNOWN)
                await context.abort(code, message.details)
        finally:
            self.carried -= 1
            reader.cancel()
            up.close(link)

    async def _read_agent(self, up: Uplink, link: RelayLink, context) -> None:
        """Carries what the agent says up, until its stream ends; then ends the link."""
        try:
            while True:
                if not up.room.is_set():
                    await up.room.wait()  # the master is behind: hold this agent meanwhile
                message = await context.read()
                if message is grpc.aio.EOF:
                    break
                up.put(RelayUp.Item(link=link.number, message=message))
                del message
        except Exception as e:  # noqa: BLE001 - the agent went away mid-stream
            log.debug("agent stream broke", error=repr(e))
        up.close(link)
        link.end(grpc.StatusCode.OK, "")

    # The master's side ------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._carry()
                error: BaseException = ConnectionError("the master ended the relay's stream")
            except asyncio.CancelledError:
                if self._stopping:
                    raise
                error = ConnectionError("the relay's stream was cancelled")
            except Exception as e:  # noqa: BLE001 - every failure means: dial again later
                error = e
            if self._stopping:
                return
            first_failure = self._backoff.attempts == 0
            failed_at = self.tracker.current() or str(self.tracker)
            delay, _ = retry_delay(error, self._backoff, self.tracker.on_error(error))
            failure = classify_error(
                error, failed_at, self.config.credentials, service="AgentRelay"
            )
            # Loud once per loss and once per new cause (a refusal names the relay's principal
            # and the ACL action); the retries after it are quiet, with a reminder a minute.
            level = "warning" if first_failure else self._said.level(failure)
            if first_failure:
                self._said.level(failure)
            fields: dict[str, object] = {"retry_in": round(delay, 2), "cause": failure.cause.value}
            if failure.cause is Cause.DENIED:
                fields.update(
                    principal=self.config.credentials.principal or "(anonymous)",
                    acl_action="relay_agents",
                )
            getattr(log, level)(
                f"{'lost the master' if first_failure else 'retrying the master'}: {failure}",
                next=self.tracker.current() or str(self.tracker),
                **fields,
            )
            await self.tracker.pause(delay)

    async def _carry(self) -> None:
        self.tracker.changed.clear()
        address = self.tracker.current()
        if not address:
            raise ConnectionError(f"no master of {self.tracker} is leading yet")
        channel = open_channel(address, self.config.credentials, redial=True)
        call = agent_relay_pb2_grpc.AgentRelayStub(channel).Carry()
        up = Uplink(call, self.config.max_queued_up, self.config.max_queued_per_agent, self.counts)
        deposed: asyncio.Task | None = None  # cuts the stream once ZooKeeper names a successor
        epoch = 0
        try:
            accepted = await call.read()
            if accepted is grpc.aio.EOF:
                raise ConnectionError("the master ended the relay's stream")
            epoch = accepted.epoch
            if self.tracker.superseded(epoch):
                raise ConnectionError(superseded(address, epoch))
            deposed = self.tracker.on_superseded(epoch, call.cancel)
            self._up = up
            self.counts.links += 1
            self.connected.set()
            self._backoff.reset()
            self._said.reset()
            log.info("carrying agents to the master", master=address)
            while True:
                batch = await call.read()
                if batch is grpc.aio.EOF:
                    return
                if self.tracker.superseded(epoch):  # a deposed leader's word: drop it
                    raise ConnectionError(superseded(address, epoch))
                self.counts.batches_down += 1
                self.counts.messages_down += len(batch.items)
                for item in batch.items:
                    up.deliver(item)
                batch = item = None  # neither held (with the batch's memory) while waiting
        except asyncio.CancelledError:
            if not self._stopping and self.tracker.superseded(epoch):
                raise ConnectionError(superseded(address, epoch)) from None
            raise
        finally:
            if deposed is not None:
                deposed.cancel()
            self.connected.clear()
            self._up = None
            up.end_all("the relay lost the master; dial again")
            call.cancel()
            await channel.close()
