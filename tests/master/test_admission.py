"""Admission of new agents by a master that is behind, and the agent's side of it."""

from __future__ import annotations

import grpc
import pytest
from master_harness import FakeAgent, start_master

from agora.agent.link_policy import WaitReason, retry_delay
from agora.common.backoff import Backoff
from agora.common.errors import Reason, reason_of
from agora.master.admission import BUSY_LAG, MAX_RETRY, refusal_delay


def test_the_refusal_delay_grows_with_how_far_behind_the_master_is_within_bounds():
    assert refusal_delay(0.0) is None and refusal_delay(BUSY_LAG) is None
    assert refusal_delay(BUSY_LAG + 0.01) == 4.04  # four times as long as it is behind
    assert refusal_delay(2.0) == 8.0
    assert refusal_delay(600.0) == MAX_RETRY


async def test_a_busy_master_refuses_a_new_agent_over_the_wire_and_the_link_waits_as_told():
    master = await start_master(None)
    agent = FakeAgent(master.address)
    try:
        assert master.core is not None
        master.core.agents.attention.behind = lambda now: 3.0  # as if its loop ran 3 s late
        await agent.connect(wait=False)
        await agent.inbox.wait_closed()
        error = agent.inbox.error
        assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert reason_of(error) == Reason.MASTER_BUSY
        assert "register again in 12.0 s" in error.details()
        # The link waits what the master said, spread by up to as much again.
        waits = [retry_delay(error, Backoff(), rng=lambda r=r: r) for r in (0.0, 0.5, 0.999)]
        assert {w.reason for w in waits} == {WaitReason.MASTER_BUSY}
        delays = [w.seconds for w in waits]
        assert delays == pytest.approx([12.0, 18.0, 23.988])
        down = retry_delay(ConnectionError("down"), Backoff(initial=0.2, cap=0.5))
        assert down.reason is WaitReason.BACKOFF and 0 < down.seconds <= 0.5
    finally:
        await agent.close()
        await master.stop(0)
