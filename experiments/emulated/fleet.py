"""A fleet of emulated agents in one process, sharing a few gRPC channels to the master (or,
with `carry`, one relay stream: experiments/emulated/carrier.py).

Each agent has its own AgentLink stream (the master cannot tell it from a real agent); streams
are multiplexed over `agents_per_channel`-sized groups of HTTP/2 connections, so ten thousand
agents need a hundred sockets, not ten thousand. Agents register in waves so that a big fleet
does not arrive as one burst of connection attempts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field

import grpc

from agora.common import Resources
from agora.common.credentials import INSECURE, Credentials, aio_channel
from agora.common.rpc import CHANNEL_OPTIONS
from agora.experiments.emulated.agent import AgentSpec, AgentStats, EmulatedAgent
from agora.experiments.emulated.carrier import Carrier
from agora.experiments.emulated.tasks import Sampler, constant

DEFAULT_RESOURCES = "cpus:4;mem:4096;disk:4096;ports:[31000-31099]"


@dataclass
class FleetConfig:
    master: str  # host:port of the master's AgentLink
    agents: int = 10
    resources: Resources = field(default_factory=lambda: Resources.parse(DEFAULT_RESOURCES))
    attributes: dict[str, str] = field(default_factory=dict)
    # Agent i also gets attribute rack=r{i % racks} when racks > 0.
    racks: int = 0
    hostname_prefix: str = "emu"
    agents_per_channel: int = 100
    # How many agents dial at once when the fleet starts.
    register_wave: int = 500
    # How long a task without a declared duration runs.
    default_duration: Sampler = field(default_factory=lambda: constant(1.0))
    heartbeat_interval: float = 5.0
    # Mutual TLS to the master (as real agents with --tls-*); INSECURE: plaintext.
    credentials: Credentials = INSECURE
    # Carry every agent to the master on one AgentRelay.Carry stream, as `agora relay` would,
    # instead of a stream each (experiments/emulated/carrier.py): the fleet then costs little
    # more than the agents' own logic, so at 100,000 agents the master, not the emulation, is
    # what is measured.
    carry: bool = False
    reconnect_backoff_initial: float = 0.2
    reconnect_backoff_max: float = 5.0
    update_backoff_initial: float = 0.5
    update_backoff_max: float = 10.0
    seed: int = 1


class EmulatedFleet:
    def __init__(self, config: FleetConfig) -> None:
        if config.agents < 0 or config.agents_per_channel < 1 or config.register_wave < 1:
            raise ValueError("agents must be >= 0, agents_per_channel and register_wave >= 1")
        self.config = config
        self.agents: list[EmulatedAgent] = []
        self.stats = AgentStats()  # shared by every agent: the fleet's totals
        self._channels: list[grpc.aio.Channel] = []
        self._carrier: Carrier | None = None
        self._changed = asyncio.Event()

    @property
    def registered(self) -> int:
        """Agents registered right now."""
        return sum(1 for a in self.agents if a.registered.is_set())

    def _channel_for(self, index: int) -> grpc.aio.Channel:
        wanted = index // self.config.agents_per_channel
        while len(self._channels) <= wanted:
            self._channels.append(
                aio_channel(self.config.master, self.config.credentials, CHANNEL_OPTIONS)
            )
        return self._channels[wanted]

    def _spec(self, index: int) -> AgentSpec:
        c = self.config
        attributes = dict(c.attributes)
        if c.racks > 0:
            attributes["rack"] = f"r{index % c.racks}"
        return AgentSpec(
            resources=c.resources,
            attributes=attributes,
            hostname=f"{c.hostname_prefix}-{index}",
            heartbeat_interval=c.heartbeat_interval,
            reconnect_backoff_initial=c.reconnect_backoff_initial,
            reconnect_backoff_max=c.reconnect_backoff_max,
            update_backoff_initial=c.update_backoff_initial,
            update_backoff_max=c.update_backoff_max,
        )

    def _on_registered(self, agent: EmulatedAgent) -> None:
        self._changed.set()

    async def start(self, timeout: float = 120.0) -> float:
        """Starts `config.agents` agents wave by wave; returns the seconds until all had
        registered. TimeoutError if they did not within `timeout`."""
        started = time.monotonic()
        await self.add_agents(self.config.agents, timeout=timeout)
        return time.monotonic() - started

    async def add_agents(self, count: int, timeout: float = 120.0) -> list[EmulatedAgent]:
        """Adds and starts `count` more agents, waiting until they are registered."""
        deadline = time.monotonic() + timeout
        if self.config.carry and self._carrier is None:
            self._carrier = Carrier(self.config.master, self.config.credentials)
            await self._carrier.start(timeout)
        added: list[EmulatedAgent] = []
        wave = self.config.register_wave
        for first in range(0, count, wave):
            batch = []
            for _ in range(min(wave, count - first)):
                index = len(self.agents)
                carrier = self._carrier
                agent = EmulatedAgent(
                    self._spec(index),
                    None if carrier is not None else self._channel_for(index),
                    connect=carrier.connect if carrier is not None else None,
                    default_duration=self.config.default_duration,
                    stats=self.stats,
                    on_registered=self._on_registered,
                    seed=self.config.seed * 1_000_003 + index,
                )
                self.agents.append(agent)
                batch.append(agent)
                agent.start()
            await self._wait_registered(batch, deadline)
            added.extend(batch)
        return added

    async def _wait_registered(self, agents: list[EmulatedAgent], deadline: float) -> None:
        while not all(a.registered.is_set() for a in agents):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sum(1 for a in agents if not a.registered.is_set())
                raise TimeoutError(f"{missing} emulated agents did not register in time")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 1.0))
            except TimeoutError:
                pass

    def totals(self) -> dict[str, int]:
        """The fleet's counters plus agents and running tasks, for progress and results."""
        totals = dataclasses.asdict(self.stats)
        totals["agents"] = len(self.agents)
        totals["registered"] = self.registered
        totals["active_tasks"] = sum(len(a.tasks) for a in self.agents)
        return totals

    async def stop(self) -> None:
        await asyncio.gather(*(a.stop() for a in self.agents), return_exceptions=True)
        if self._carrier is not None:
            await self._carrier.stop()
            self._carrier = None
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
