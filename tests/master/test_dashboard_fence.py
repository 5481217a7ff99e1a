"""Issue 38: a master that can no longer prove it leads takes no action from its dashboard
either (its gRPC calls are refused by the fence; common/fence.py)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agora.master.dashboard.app import Dashboard


class View:
    def __init__(self) -> None:
        self.drained: list[str] = []

    def drain(self, agent_id: str) -> None:
        self.drained.append(agent_id)


async def test_a_master_that_no_longer_leads_takes_no_dashboard_action():
    view, leads = View(), [True]
    dashboard = Dashboard(view, leads=lambda: leads[0])  # type: ignore[arg-type]
    app = web.Application()
    app.add_routes(dashboard.routes())
    async with TestClient(TestServer(app)) as client:
        done = await client.post("/api/agents/agent-1/drain", json={})
        assert done.status == 200, await done.text()
        leads[0] = False  # its lease ran out
        refused = await client.post("/api/agents/agent-2/drain", json={})
        assert refused.status == 503
        assert "this master no longer leads" in (await refused.json())["error"]
    assert view.drained == ["agent-1"]
