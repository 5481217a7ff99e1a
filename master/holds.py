"""Holds, the master's side: the Hold and ReleaseHold calls, and holds timing out.

framework --Hold--> hold(): checked, handed to the allocator (allocator/holds.py), which
  takes what fits of the shape from free resources in every cycle -> wake(all)
met (OfferCycle.allocate): its resources in one OFFERS event, then HOLD (MET)
expired (expire, on the master's tick) or released (ReleaseHold): resources back, HOLD event
the framework disconnects or is torn down: OfferCycle.end_holds, no event
"""

from __future__ import annotations

import math

import grpc
import structlog

from agora.common import ResourceError, Resources, new_id
from agora.master.allocator import AllocatorProtocol, Hold, HoldRefused
from agora.master.caller import framework_for_call
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.offer_cycle import OfferCycle
from agora.master.registry import Registry
from agora.v1 import scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["MAX_HOLD_TASKS", "HoldBook"]

# The most tasks one hold may collect for (a gang larger than this is not a gang).
MAX_HOLD_TASKS = 10_000

Event = scheduler_pb2.Event


class HoldBook:
    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        allocator: AllocatorProtocol,
        offers: OfferCycle,
        clock: Clock,
        counts: MasterCounters,
    ) -> None:
        self.config, self.reg, self.allocator, self.offers = config, reg, allocator, offers
        self.clock, self.counts = clock, counts

    def hold(self, request: scheduler_pb2.HoldRequest) -> str:
        """Starts a hold for the caller's framework; returns its id."""
        framework = framework_for_call(self.reg, request.framework_id, request.stream_id)
        if not 1 <= request.count <= MAX_HOLD_TASKS:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"count must be 1 to {MAX_HOLD_TASKS} tasks, got {request.count}",
            )
        try:
            size = Resources.from_proto(request.resources)
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad resources: {e}") from None
        if size.ranges or not size:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"a hold's task size takes scalar resources (cpus, mem, ...), got {size or '{}'}",
            )
        timeout = request.timeout_seconds or self.config.default_hold_seconds
        if not (math.isfinite(timeout) and 0 < timeout <= self.config.max_hold_seconds):
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"timeout_seconds must be more than 0 and at most {self.config.max_hold_seconds:g}"
                f" (--max-hold), got {request.timeout_seconds}",
            )
        hold_id = new_id("hold")
        try:
            self.allocator.add_hold(
                hold_id,
                framework.framework_id,
                request.count,
                size,
                request.distinct_agents,
                self.clock.now() + timeout,
            )
        except HoldRefused as e:
            raise CallError(
                grpc.StatusCode.FAILED_PRECONDITION, str(e), Reason.HOLD_REFUSED
            ) from None
        log.debug(
            "hold started",
            hold_id=hold_id,
            framework_id=framework.framework_id,
            count=request.count,
            size=str(size),
            distinct_agents=request.distinct_agents,
            timeout=timeout,
        )
        self.offers.wake()  # it may collect from what is free now, on any agent
        return hold_id

    def release(self, request: scheduler_pb2.ReleaseHoldRequest) -> None:
        framework = framework_for_call(self.reg, request.framework_id, request.stream_id)
        hold = self.allocator.hold(request.hold_id)
        if hold is None or hold.framework_id != framework.framework_id:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"hold {request.hold_id!r} is not collecting for this framework (unknown, or "
                "already met, expired or released)",
                Reason.HOLD_UNKNOWN,
            )
        self.allocator.release_hold(hold.hold_id)
        self._ended(hold, scheduler_pb2.HOLD_RELEASED, "released by the framework")

    def expire(self) -> None:
        """Releases the holds past their timeout (the master's tick calls this)."""
        for hold in self.allocator.expire_holds(self.clock.now()):
            self.counts.holds_expired += 1
            self._ended(
                hold,
                scheduler_pb2.HOLD_EXPIRED,
                f"timed out with {hold.count - hold.remaining} of {hold.count} tasks' "
                "resources collected; they are released",
            )

    def _ended(self, hold: Hold, state: scheduler_pb2.HoldState, message: str) -> None:
        framework = self.reg.frameworks.get(hold.framework_id)
        if framework is not None:
            framework.send(
                Event(hold=Event.HoldUpdate(hold_id=hold.hold_id, state=state, message=message))
            )
        log.debug("hold ended", hold_id=hold.hold_id, framework_id=hold.framework_id, why=message)
        for agent_id in hold.taken:
            self.offers.wake(agent_id)
