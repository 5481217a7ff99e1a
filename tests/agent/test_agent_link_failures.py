"""The agent's link names why it cannot register, once (issue 32): a refusal by the master's
ACLs is logged at warning with the principal and the ACL action the first time, and the retries
after it (with backoff) only at debug; a master that is not there reads as connection refused.
Against a real master (its ACL file) and a closed port; no wall-clock assertion."""

from __future__ import annotations

import asyncio
import socket

import structlog
from harness import eventually_async
from master_harness import start_master

from agora.agent.link import MasterLink
from agora.v1 import agent_link_pb2, common_pb2


class _Agent:
    """The least a link's handler does: a Register naming nothing, no tasks."""

    def build_register(self):
        return agent_link_pb2.AgentMessage.Register(
            info=common_pb2.AgentInfo(hostname="h", address="127.0.0.1:1")
        )

    def on_registered(self, msg):  # pragma: no cover - the master refuses it
        raise AssertionError("the master should refuse this agent")

    on_run_task = on_kill_task = on_status_update_ack = on_shutdown_framework = on_registered

    async def on_shutdown(self, msg):  # pragma: no cover
        raise AssertionError("no shutdown expected")


def _link_failures(logs: list[dict]) -> list[dict]:
    """The link's own lines about a failed attempt."""
    return [e for e in logs if e["event"].endswith("with backoff")]


async def _failing_link(master: str, enough) -> list[dict]:
    """Runs a link to `master` (fast backoff) until `enough(failures)` holds for the lines it
    logged about its failed attempts; returns those lines."""
    link = MasterLink(master, _Agent(), backoff_initial=0.01, backoff_max=0.05)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(link.run())
        try:
            await eventually_async(
                lambda: enough(_link_failures(logs)), timeout=30, message="repeated attempts"
            )
        finally:
            await link.stop(task)
    return _link_failures(logs)


async def test_a_refusal_by_the_acls_is_said_once_with_principal_and_action(tmp_path):
    acls = tmp_path / "acls.yaml"
    acls.write_text(
        # Anonymous (no TLS) and named by a rule, so the master reads it and refuses it the
        # registration itself.
        "register_agents: [{principals: [agent-1]}]\nread_state: [{principals: [ANY, ANONYMOUS]}]\n"
    )
    master = await start_master(tmp_path, acls_path=acls)
    try:
        said = await _failing_link(master.address, lambda failures: len(failures) >= 4)
    finally:
        await master.stop()
    assert [e["log_level"] for e in said[:4]] == ["warning", "debug", "debug", "debug"]
    warning = said[0]
    assert warning["principal"] == "(anonymous)" and warning["acl_action"] == "register_agents"
    assert "refused this caller" in warning["event"] and "PERMISSION_DENIED" in warning["event"]
    assert "may not register agent" in warning["event"]  # the master's own words


async def test_a_master_that_is_not_there_reads_as_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    said = await _failing_link(closed, lambda failures: len(failures) >= 3)
    assert [e["log_level"] for e in said[:3]] == ["warning", "debug", "debug"]
    assert said[0]["cause"] == "connection refused"
    assert "nothing listens there" in said[0]["event"] and "--host" in said[0]["event"]
