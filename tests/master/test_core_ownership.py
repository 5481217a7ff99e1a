"""Who registered an agent or subscribed a framework is remembered across a restart (issue 37):
only that principal may take the id over again, as before the restart."""

from __future__ import annotations

import grpc
import pytest
from core_harness import CoreHarness
from master_harness import agent_info

from agora.common import Resources
from agora.master.errors import CallError
from agora.v1 import agent_link_pb2, common_pb2

AgentMessage = agent_link_pb2.AgentMessage


def test_a_framework_keeps_its_principal_across_a_restart(tmp_path):
    h = CoreHarness(state_dir=tmp_path)
    info = common_pb2.FrameworkInfo(name="batch", role="*")
    framework, _ = h.core.frameworks.subscribe(info, "batch")
    framework_id = framework.framework_id
    h = h.restart()
    stolen = common_pb2.FrameworkInfo(name="batch", role="*", framework_id=framework_id)
    with pytest.raises(CallError) as e:
        h.core.frameworks.subscribe(stolen, "mallory")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "mallory may not fail over to framework" in e.value.message
    again, _ = h.core.frameworks.subscribe(stolen, "batch")  # its own principal: fine
    assert again.framework_id == framework_id and again.principal == "batch"


def test_an_agent_keeps_its_principal_across_a_restart(tmp_path):
    h = CoreHarness(state_dir=tmp_path)
    resources = Resources.parse("cpus:1;mem:256")
    first = AgentMessage.Register(info=agent_info("", "h1", resources, {}))
    agent = h.core.agents.register(first, h.new_session(), "agent-1")
    agent_id = agent.agent_id
    h = h.restart()
    again = AgentMessage.Register(info=agent_info(agent_id, "h1", resources, {}))
    with pytest.raises(CallError) as e:
        h.core.agents.register(again, h.new_session(), "agent-2")
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    back = h.core.agents.register(again, h.new_session(), "agent-1")
    assert back.agent_id == agent_id and back.principal == "agent-1"
