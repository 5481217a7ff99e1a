"""A fleet's agents carried to the master on one AgentRelay.Carry stream, as `agora relay`
carries real agents (agent_relay.proto), with no gRPC stream per agent.

With a stream each, an emulated agent costs its fleet process (and a relay, when there is one)
gRPC's per-message work on every heartbeat and update: at 100,000 agents on a 2-core machine
the fleets and relays, not the master, were the limit. Carried, each agent's messages go
straight into the fleet's one Carry stream, batched (the relay's own Uplink, agent/relay.py,
writing what LINGER_SECONDS gathered), and what the master sends each agent comes back on it.
The master sees what it sees with relays: links registered, heartbeating and acknowledged as
agents on their own streams.

`Carrier.connect` stands in for AgentLinkStub.Connect: it takes the agent's request iterator
and returns a call with `read()` and `cancel()`, which ends as a relayed agent's stream ends
(EOF when the master ends the link normally; an AioRpcError with the master's status, and its
MASTER_BUSY reason and retry time, otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import structlog

from agora.agent.relay import RelayCounts, RelayLink, Uplink
from agora.common.backoff import Backoff
from agora.common.credentials import INSECURE, Credentials
from agora.common.rpc import describe_rpc_error, open_channel
from agora.v1 import agent_relay_pb2, agent_relay_pb2_grpc

log = structlog.get_logger(__name__)

RelayUp = agent_relay_pb2.RelayUp
RelayDown = agent_relay_pb2.RelayDown
_CODES = {code.value[0]: code for code in grpc.StatusCode}
# As `agora relay`'s defaults (agent/relay.py's RelayConfig).
MAX_QUEUED_UP = 20_000
MAX_QUEUED_PER_AGENT = 10_000
DIAL_SECONDS = 30.0  # for the master to take a new stream, once the first was lost
# What the agents say waits this long for more to join it before the fleet writes it up.
# Spread heartbeats (100,000 agents every 10 s) otherwise go one per stream message, each
# costing the fleet and the master gRPC's per-message work (about 60 us a write here); a relay
# under that load batches as much on its own, since its writes queue. Registrations and status
# updates wait as long: a few ms on a path measured in seconds (`agora experiment scale`).
LINGER_SECONDS = 0.01


class CarrierDown(ConnectionError):
    """The fleet's stream to the master is not open (not yet, or not any more)."""


class Carrier:
    """One AgentRelay.Carry stream to the master, shared by a fleet's agents. When it breaks,
    every link ends (each agent dials again, as after losing a relay) and the carrier dials
    the master again with a jittered backoff, as `agora relay` does."""

    def __init__(self, master: str, credentials: Credentials = INSECURE) -> None:
        self.master, self.credentials = master, credentials
        self.counts = RelayCounts()
        self.streams = 0  # Carry streams the master accepted, over the carrier's life
        self._up: Uplink | None = None
        self._channel: grpc.aio.Channel | None = None
        self._runner: asyncio.Task | None = None
        self._backoff = Backoff()
        self._stopping = False

    async def start(self, timeout: float = 30.0) -> None:
        """Dials the master until it accepts the stream (a master busy with other fleets may
        time a connection out: dialled again, as an agent would), then keeps it open."""
        self._channel = open_channel(self.master, self.credentials, redial=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                call = await asyncio.wait_for(self._dial(), max(0.1, deadline - loop.time()))
                break
            except (grpc.aio.AioRpcError, CarrierDown, TimeoutError):
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(min(self._backoff.next_delay(), deadline - loop.time()))
        self._backoff.reset()
        self._runner = asyncio.create_task(self._run(call), name="carrier")

    async def _dial(self):
        assert self._channel is not None
        call = agent_relay_pb2_grpc.AgentRelayStub(self._channel).Carry()
        accepted = await call.read()
        if accepted is grpc.aio.EOF:
            raise CarrierDown(f"the master at {self.master} ended the fleet's relay stream")
        self._up = Uplink(call, MAX_QUEUED_UP, MAX_QUEUED_PER_AGENT, self.counts, LINGER_SECONDS)
        self.streams += 1
        return call

    async def _run(self, call) -> None:
        while True:
            await self._carry(call)
            while True:  # dial again until the master takes the stream
                await asyncio.sleep(self._backoff.next_delay())
                try:
                    call = await asyncio.wait_for(self._dial(), DIAL_SECONDS)
                    break
                except Exception as e:  # noqa: BLE001 - every failure means: dial again later
                    # Loud once per loss, quiet after (a refusal such as PERMISSION_DENIED
                    # is retried as the relay retries it, and says so once).
                    level = log.warning if self._backoff.attempts <= 1 else log.debug
                    level("the fleet's relay stream: dialling the master failed",
                          master=self.master, error=describe_rpc_error(e))  # fmt: skip
            self._backoff.reset()

    async def _carry(self, call) -> None:
        """Delivers what the master sends until the stream ends; then ends every link."""
        up = self._up
        assert up is not None
        try:
            while True:
                batch = await call.read()
                if batch is grpc.aio.EOF:
                    break
                self.counts.batches_down += 1
                self.counts.messages_down += len(batch.items)
                for item in batch.items:
                    up.deliver(item)
                batch = item = None  # not held while waiting
        except grpc.aio.AioRpcError:
            pass  # the stream broke
        except asyncio.CancelledError:
            if self._stopping:
                raise
            # The call was cancelled, not this task: grpc.aio raises the same for both.
        finally:
            up.end_all("the fleet's relay stream to the master ended; dial again")
            call.cancel()

    def connect(self, requests) -> CarriedCall:
        """An agent's link on the shared stream: AgentLinkStub.Connect's stand-in."""
        up = self._up
        if up is None or up.broken:
            raise CarrierDown("the fleet's relay stream to the master is down; dial again")
        # Each agent speaks as the fleet authenticated (its certificate's name), as a relay
        # tells the master who each of its agents authenticated as.
        return CarriedCall(up, requests, self.credentials.principal)

    async def stop(self) -> None:
        self._stopping = True
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        if self._up is not None:
            self._up.end_all("the fleet is stopping")
            self._up.call.cancel()
        if self._channel is not None:
            await self._channel.close()


class CarriedCall:
    """One agent's link on a Carrier: sends what its request iterator yields (the first, its
    Register, opens the link) and reads what the master sends it."""

    def __init__(self, up: Uplink, requests, principal: str = "") -> None:
        self._up = up
        self._principal = principal
        self._link: RelayLink | None = None
        self._opened = asyncio.Event()
        self._cancelled = False
        self._pump = asyncio.create_task(self._send(requests))

    async def _send(self, requests) -> None:
        up = self._up
        try:
            async for message in requests:
                if self._link is None:
                    if up.broken:  # the stream broke since connect(): a link nothing would end
                        self._link = RelayLink(0, None)
                        self._link.end(grpc.StatusCode.UNAVAILABLE, "the relay stream broke")
                        self._opened.set()
                        return
                    self._link = up.open(self._principal, message)
                    self._opened.set()
                    continue
                if not up.room.is_set():
                    await up.room.wait()  # the master is behind: as a relay holds its agents
                up.put(RelayUp.Item(link=self._link.number, message=message))
        finally:
            link = self._link
            if link is not None and not self._cancelled:
                up.close(link)
                # The agent's requests ended (its session closed), or the Uplink cut a link
                # that stopped reading (it marks the link ended and cancels this task, telling
                # the reader nothing): either way a reader still waiting must hear it is over.
                link.ended = True
                link.queue.put_nowait(
                    RelayDown.Ended(
                        code=grpc.StatusCode.UNAVAILABLE.value[0],
                        details="the agent's link was closed",
                    )
                )

    async def read(self):
        """The master's next message to this agent; grpc.aio.EOF once it ended the link."""
        await self._opened.wait()
        link = self._link
        if self._cancelled or link is None:
            raise asyncio.CancelledError
        message = await link.queue.get()
        if self._cancelled:
            raise asyncio.CancelledError
        if not isinstance(message, RelayDown.Ended):
            return message
        if message.code == 0:
            return grpc.aio.EOF
        code = _CODES.get(message.code, grpc.StatusCode.UNKNOWN)
        trailing = grpc.aio.Metadata()
        if message.status_details:
            trailing.add("grpc-status-details-bin", message.status_details)
        raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, message.details)

    def cancel(self) -> None:
        """Ends the link as an agent's cancelled stream ends: a read waiting gets
        CancelledError (what grpc.aio's call.read() raises once its call is cancelled)."""
        if self._cancelled:
            return
        self._cancelled = True
        self._pump.cancel()
        link = self._link
        if link is not None:
            self._up.close(link)
            link.ended = True
            link.queue.put_nowait(None)  # wakes a reader, which sees the cancellation
        else:
            self._opened.set()  # a reader waiting for the link sees the cancellation
