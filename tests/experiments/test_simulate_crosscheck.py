"""The simulator checks itself against the real thing: one small trace through a real master,
an emulated fleet and real SDK frameworks, and through the simulator, agree within the
stated tolerance (crosscheck.TOLERANCE)."""

from __future__ import annotations

import pytest

from agora.experiments.simulate.crosscheck import TOLERANCE, cross_check
from agora.experiments.simulate.generator import Shape, generate

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize("mode", ["pessimistic", "optimistic"])
async def test_the_simulator_agrees_with_a_real_master_on_the_same_trace(tmp_path, mode):
    # 20 agents, 40 s: Google-shaped jobs with their durations scaled down a hundredfold, so
    # that tasks end, queue and wait within the run.
    trace = generate(
        Shape(
            agents=20,
            agent_cpus=4,
            agent_mem=16384,
            seconds=40,
            load=0.8,
            duration_scale=0.01,
            max_tasks=40,
            seed=2,
        )
    )
    result = await cross_check(trace, tmp_path, mode)
    real, simulated = result["real"], result["simulated"]
    assert real["tasks_launched"] > 50  # the real run did real work
    for role in ("batch", "service"):
        assert real["job_wait_seconds"][role]["all"]["count"] > 0, role
    assert result["agree"], (result["checks"], TOLERANCE)
    # The simulator counted the same jobs as launched.
    for role in ("batch", "service"):
        launched = [r["job_wait_seconds"][role]["all"]["count"] for r in (real, simulated)]
        assert abs(launched[0] - launched[1]) <= 1, (role, launched)
