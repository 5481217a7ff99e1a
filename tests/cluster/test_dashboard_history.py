"""The dashboard's history page asks the batch framework for the newest HISTORY_SHOWN finished
jobs (ListJobsRequest.limit) instead of every finished job with all its instances, and says how
many there are in all. A fake batch API records what the page asked."""

from __future__ import annotations

from types import SimpleNamespace

from aiohttp.test_utils import make_mocked_request

from agora.master.dashboard import batch as routes
from agora.v1 import batch_pb2 as B
from agora.v1 import batch_pb2_grpc


class FakeBatch:
    """ListJobs answering `reply`, each request kept in `asked`."""

    def __init__(self, reply: B.ListJobsResponse) -> None:
        self.reply = reply
        self.asked: list[B.ListJobsRequest] = []

    async def ListJobs(self, request, timeout=None, metadata=None):
        self.asked.append(request)
        return self.reply


def history_of(monkeypatch, reply: B.ListJobsResponse, query: str = ""):
    fake = FakeBatch(reply)
    monkeypatch.setattr(batch_pb2_grpc, "BatchStub", lambda channel: fake)

    async def framework_api(name):
        return object(), SimpleNamespace(info=SimpleNamespace(role="batch"))

    dashboard = SimpleNamespace(framework_api=framework_api)
    request = make_mocked_request("GET", f"/api/job-history{query}")
    return fake, routes.BatchRoutes(dashboard).history(request)  # type: ignore[arg-type]


def jobs(count: int) -> list[B.Job]:
    return [B.Job(job_id=f"job-{i}", state=B.JOB_SUCCEEDED) for i in range(count)]


async def test_history_asks_for_the_newest_jobs_it_shows_and_says_how_many_there_are(
    monkeypatch,
):
    reply = B.ListJobsResponse(jobs=jobs(routes.HISTORY_SHOWN), total=5000)
    fake, answer = history_of(monkeypatch, reply, "?owner=carol")
    shown = await answer
    [asked] = fake.asked
    assert asked.limit == routes.HISTORY_SHOWN and asked.include_instances
    assert asked.owner == "carol" and list(asked.states) == routes.ENDED
    assert len(shown["jobs"]) == routes.HISTORY_SHOWN and shown["total"] == 5000


async def test_history_from_a_batch_framework_that_ignores_the_limit_keeps_the_newest(
    monkeypatch,
):
    # Older batch frameworks know no limit: every finished job, no total.
    reply = B.ListJobsResponse(jobs=jobs(routes.HISTORY_SHOWN + 50))
    _, answer = history_of(monkeypatch, reply)
    shown = await answer
    assert len(shown["jobs"]) == routes.HISTORY_SHOWN
    assert shown["jobs"][0]["job_id"] == "job-50" and shown["total"] == routes.HISTORY_SHOWN + 50
