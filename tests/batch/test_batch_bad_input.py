"""Bad input to the Batch API and `agora job`: the right gRPC status, a one-line CLI error with
exit 1, and nothing stored half-way."""

from __future__ import annotations

import grpc
import pytest
from batch_harness import BatchCluster, run_cli

from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


def job(command=None, instances=1, cpus=0.1, mem=16.0, **task):
    command = command if command is not None else C.CommandInfo(shell="true")
    return B.SubmitJobRequest(
        spec=B.JobSpec(
            name="bad",
            instances=instances,
            task=B.TaskTemplate(command=command, cpus=cpus, mem=mem, **task),
        )
    )


@pytest.mark.parametrize(
    "request_, code, says",
    [
        (job(command=C.CommandInfo()), "INVALID_ARGUMENT", "no command"),
        (job(command=C.CommandInfo(argv=[""])), "INVALID_ARGUMENT", "argv[0]"),
        (
            job(command=C.CommandInfo(argv=["true"], shell="true")),
            "INVALID_ARGUMENT",
            "exactly one",
        ),
        (job(cpus=0), "INVALID_ARGUMENT", "cpus must be a positive number"),
        (job(cpus=-1), "INVALID_ARGUMENT", "cpus must be a positive number"),
        (job(mem=0), "INVALID_ARGUMENT", "mem must be a positive number"),
        (job(cpus=float("nan")), "INVALID_ARGUMENT", "cpus"),
        (job(disk=-5), "INVALID_ARGUMENT", "disk"),
        (job(instances=0), "INVALID_ARGUMENT", "instances"),
        (job(role="analytics"), "INVALID_ARGUMENT", "role"),
        (job(cpus=64), "FAILED_PRECONDITION", "largest agent"),
        (job(mem=4096), "FAILED_PRECONDITION", "largest agent"),
        (job(ports=500), "FAILED_PRECONDITION", "largest agent"),
    ],
)
async def test_bad_submissions_are_refused_and_nothing_is_stored(cluster, request_, code, says):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cluster.stub.SubmitJob(request_)
    assert info.value.code().name == code
    assert says in info.value.details()
    assert not (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs


async def test_unknown_job_ids_are_not_found(cluster):
    for call, request in [
        ("GetJob", B.GetJobRequest(job_id="job-nope")),
        ("KillJob", B.KillJobRequest(job_id="job-nope")),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await getattr(cluster.stub, call)(request)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "job-nope" in info.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in cluster.stub.WatchJob(B.WatchJobRequest(job_id="job-nope")):
            pass
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cluster.stub.GetJob(B.GetJobRequest())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_killing_an_ended_job_is_a_failed_precondition(cluster):
    job_id = await cluster.submit("true")
    await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await cluster.stub.KillJob(B.KillJobRequest(job_id=job_id))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already ended (SUCCEEDED)" in info.value.details()


@pytest.mark.parametrize(
    "args, says",
    [
        (["job", "submit", "--"], "no command"),
        (["job", "submit", "--cpus", "0", "--", "true"], "cpus must be a positive number"),
        (["job", "submit", "--mem", "-32", "--", "true"], "mem must be a positive number"),
        (["job", "submit", "--cpus", "100", "--", "true"], "has cpus:2;mem:1024"),
        (["job", "submit", "--instances", "0", "--", "true"], "--instances must be at least 1"),
        (["job", "status", "job-nope"], "no job has the id or the name 'job-nope'"),
        (["job", "kill", "job-nope"], "no job 'job-nope'"),
        (["job", "logs", "job-nope"], "no job has the id or the name 'job-nope'"),
    ],
)
async def test_cli_bad_input_is_one_line_and_exit_1(cluster, args, says):
    result = await cluster.cli(*args)
    assert result.code == 1, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("agora job: ") and says in lines[0]
    assert result.out == ""
    assert not (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs


async def test_logs_of_an_instance_not_launched_yet(cluster):
    held = await cluster.submit("true", instances=3, cpus=1.5, gang=True)  # never fits
    result = await cluster.cli("job", "logs", held, "--instance", "1")
    assert result.code == 1 and "has not been launched yet" in result.err
    result = await cluster.cli("job", "logs", held, "--instance", "9")
    assert result.code == 1 and "instances 0-2" in result.err


def test_no_master_is_one_line(tmp_path):
    result = run_cli("job", "list", "--master", "127.0.0.1:1")
    assert result.code == 1
    assert result.err.startswith("agora job: cannot reach the master at 127.0.0.1:1")
    assert len(result.err.strip().splitlines()) == 1


async def test_no_batch_daemon_is_one_line(tmp_path):
    c = await BatchCluster(tmp_path, in_process_batch=False).start()
    try:
        result = await c.cli("job", "list")
        assert result.code == 1
        assert "no 'batch' framework is registered" in result.err
        assert len(result.err.strip().splitlines()) == 1
        # Registered once, then gone: its published address no longer answers.
        await c.start_batch()
        await c.stop_batch()
        result = await c.cli("job", "status", "job-x")
        assert result.code == 1 and "does not answer; is `agora batch` running?" in result.err
        assert len(result.err.strip().splitlines()) == 1
    finally:
        await c.stop()


async def test_an_id_of_megabytes_is_refused_without_being_echoed(cluster):
    """issue 37: the services and agent servers echoed a 10 MB id in full in their errors.
    Every Agora server now bounds ids and names before a handler sees them
    (common.request_limits), showing only the first characters."""
    huge = "j" * (10 * 1024 * 1024)
    for call, request in [
        ("GetJob", B.GetJobRequest(job_id=huge)),
        ("KillJob", B.KillJobRequest(job_id=huge)),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await getattr(cluster.stub, call)(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "job_id: 10485760 characters" in info.value.details()
        assert len(info.value.details()) < 200


async def test_a_name_of_megabytes_is_refused_and_never_logged(tmp_path):
    """Issue 36, item 9: a 10 MB job name was stored and logged in full. Refused now with
    INVALID_ARGUMENT saying the limit, by a real `agora batch` logging at debug level, and
    not a line of its log holds the name."""
    import asyncio

    from harness import Daemon

    from agora.common.rpc import insecure_channel
    from agora.v1 import batch_pb2_grpc

    c = await BatchCluster(tmp_path, in_process_batch=False).start()
    log = tmp_path / "batch.log"
    daemon = Daemon(
        [
            "batch", "--master", c.master.address, "--port", "0", "--log-level", "debug",
            "--state-dir", str(tmp_path / "batch"),
        ],
        log,
    )  # fmt: skip
    try:
        await asyncio.to_thread(daemon.start)
        huge = "N" * (10 * 1024 * 1024)
        async with insecure_channel(daemon.address) as channel:
            stub = batch_pb2_grpc.BatchStub(channel)
            request = job()
            request.spec.name = huge
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SubmitJob(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = info.value.details()
            assert "name: 10485760 characters" in details and "the limit is 256" in details
            assert len(details) < 300
            graph = B.SubmitJobsRequest(specs=[request.spec])
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SubmitJobs(graph)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert len(info.value.details()) < 300
            assert not (await stub.ListJobs(B.ListJobsRequest())).jobs
            ok = job()
            ok.spec.name = "fine"
            await stub.SubmitJob(ok)  # and it still serves
    finally:
        await asyncio.to_thread(daemon.stop)
        await c.stop()
    written = log.read_text() + "\n".join(daemon.lines)
    assert "job submitted" in written  # the log is there, at debug level
    assert "N" * 300 not in written
