"""Real DDP pods through the real scheduler, triggerer, dag-processor and API server: a sync
task waits on its worker; a deferred task's triggerer is SIGKILLed while the ranks run, and
its replacement adopts the same job (the pods were never told) and ends the task with the
ranks' all_reduce."""

from __future__ import annotations

import time
import uuid

import pytest
import torch

from tests.airflow.test_scheduler_reliability import jobs_of, stack_for, trigger, wait, xcom  # noqa: F401
from tests.node.test_ddp import ddp_job
from tests.node.workloads import create_pvc, volume_folder

# the ranks hold on for a while after the all_reduce, so the triggerer dies while they run
SLOW_DDP = '''
import time
import torch.distributed as dist
exec(open("/scripts/ddp.py").read())
time.sleep(float(__import__("os").environ.get("LINGER", "0")))
'''


def ddp_setup(admin, namespace: str) -> tuple[str, str]:
    from tests.node.workloads import DDP

    claim = create_pvc(admin, namespace)
    name = f"script-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                  "data": {"ddp.py": DDP, "main.py": SLOW_DDP}}, namespace=namespace)
    return claim, name


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred-triggerer-killed"])
def test_ddp_through_the_scheduler(stack_for, kube, admin, real_node, deferrable):  # noqa: F811
    namespace = kube.namespace
    claim, script = ddp_setup(admin, namespace)
    job = ddp_job(script, claim, "native")
    job["env"]["LINGER"] = "20" if deferrable else "0"
    dag_id = f"ddp_{uuid.uuid4().hex[:6]}"
    stack = stack_for(dag_id, job=job, deferrable=deferrable, queue_timeout=240)
    run_id = trigger(stack, dag_id)
    if deferrable:
        stack.wait_for_task(dag_id, run_id, "train", {"deferred"}, timeout=180)
        names = wait(lambda: list(jobs_of(kube)), 60, "the job")
        time.sleep(5)  # the ranks are up and meeting
        stack.kill("triggerer")
        time.sleep(5)
        assert stack.task_instance(dag_id, run_id, "train")["state"] == "deferred"
        stack.start("triggerer")
    stack.wait_for_runs(dag_id, 1, {"success"}, timeout=300)
    result = xcom(stack, dag_id, run_id)
    assert result["metrics"]["allreduce"] == 3.0 and result["metrics"]["world_size"] == 2
    if deferrable:
        assert list(jobs_of(kube)) == names and result["attempt"] == 1  # adopted, not submitted again
    checkpoint = volume_folder(admin, namespace, claim) / "native" / "step-000001" / "model.pt"
    assert torch.load(checkpoint) == {"allreduce": 3.0, "world": 2}
    log = stack.task_log(dag_id, run_id, "train")
    assert "] rank 0/2 on " in log and "] rank 1/2 on " in log
