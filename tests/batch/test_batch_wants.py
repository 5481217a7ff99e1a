"""What the batch framework tells the master it waits for (wants.py): pure."""

from __future__ import annotations

from agora.common import Resources
from agora.frameworks.batch.wants import wants_of
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C
from agora.v1 import services_pb2 as S


def job(cpus: float, mem: float, **spec) -> B.Job:
    task = B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=cpus, mem=mem)
    return B.Job(job_id="j", spec=B.JobSpec(name="j", instances=10, task=task, **spec))


def test_the_total_of_the_ready_instances_and_the_least_of_each_resource():
    total, smallest = wants_of([(job(1, 512), 3), (job(0.5, 1024), 2)])
    assert total == Resources.parse("cpus:4;mem:3584")
    assert smallest == Resources.parse("cpus:0.5;mem:512")


def test_a_resource_some_instance_does_not_ask_for_bounds_nothing():
    gpu = job(1, 128)
    gpu.spec.task.gpus = 1
    total, smallest = wants_of([(gpu, 1), (job(2, 64), 1)])
    assert total == Resources.parse("cpus:3;mem:192;gpus:1")
    assert smallest == Resources.parse("cpus:1;mem:64")


def test_constraints_or_a_gang_ask_for_every_agent():
    constrained = job(1, 128, constraints=[S.Constraint(field="hostname", operator="UNIQUE")])
    assert wants_of([(job(1, 128), 1), (constrained, 1)]) is None
    assert wants_of([(job(1, 128, gang=True), 2)]) is None


def test_nothing_ready_wants_nothing():
    assert wants_of([]) is None  # no amount to size offers by: no limit
