"""A 2-pod torchrun DDP job over gloo on the real node, on every Kubernetes backend that runs
PyTorch, through real Airflow (dag.test: the sync wait, and the deferred one whose trigger
runs inline). The ranks meet through the names the backend wires (the headless Service on
native, the controllers' own Services on the others), run an all_reduce that every rank
checks, report metrics to the task's XCom through the runtime helper, and rank 0 saves a
checkpoint to a PVC, which the test reads back from the volume's folder on this host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.airflow.test_operator_dagtest import xcom
from tests.node.workloads import DDP, create_pvc, create_script, volume_folder
from tests.support.realnode import on_real_node


def ddp_job(script: str, claim: str, backend: str) -> dict:
    return on_real_node(
        type="pytorch", roles={"worker": 2}, command=["torchrun", "/scripts/main.py"],
        env={"OMP_NUM_THREADS": "1", "CKPT": f"/ckpt/{backend}"},
        resources={"cpu": "500m", "memory": "1Gi"},
        storage=[{"type": "pvc", "claim_name": claim, "mount_path": "/ckpt"},
                 {"type": "config_map", "name": script, "mount_path": "/scripts", "read_only": True}],
        max_running_time="10m")


def task_log(text: str) -> str:
    """The task's own lines (ours and the job's), without Airflow's bookkeeping around them;
    also kept in test-artifacts/node-task.log whole."""
    keep = [line.split(" [dlc_airflow")[0].split(" [airflow.task")[0] for line in text.splitlines()
            if "[task]" in line or "dlc_airflow" in line or "] [" in line]
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "node-task.log").write_text(text)
    return "\n".join(keep)[-8000:]


def run(dag_files, conn_id: str, job: dict, backend: str, **kwargs):
    dag = dag_files.operator_dag(conn_id=conn_id, backend=backend, job=job, queue_timeout=240, **kwargs)
    return dag.test().get_task_instance("train")


def check_ddp(ti, admin, namespace: str, claim: str, backend: str, text: str) -> None:
    assert ti.state == "success", task_log(text)
    result = xcom(ti)
    # every rank's all_reduce gave 1 + 2 (the ranks' own assert would have failed the job)
    assert result["metrics"]["allreduce"] == 3.0 and result["metrics"]["world_size"] == 2
    # the ranks' own lines streamed into the task log, prefixed with their replica: two ranks
    # on two pods (a Kubeflow job's pods still running when its master ends are deleted with
    # what they reported, so the coordinator's report is the one every backend keeps)
    hosts = dict(re.findall(r"\] rank (\d)/2 on (\S+): all_reduce 3 ", text))
    assert sorted(hosts) == ["0", "1"] and len(set(hosts.values())) == 2, task_log(text)
    assert result["outputs"]["rank_host_0"] == hosts["0"]
    # the checkpoint rank 0 saved is on the claim's volume
    checkpoint = volume_folder(admin, namespace, claim) / backend / "step-000001" / "model.pt"
    assert torch.load(checkpoint) == {"allreduce": 3.0, "world": 2}
    assert result["outputs"]["checkpoint"].endswith(f"/ckpt/{backend}/step-000001")


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_native_ddp_meets_through_the_headless_service(kube, admin, k8s_conn, dag_files, real_node, capfd,
                                                       deferrable):
    namespace = kube.namespace
    claim, script = create_pvc(admin, namespace), create_script(admin, namespace, DDP)
    ti = run(dag_files, k8s_conn, ddp_job(script, claim, "native"), "native", deferrable=deferrable)
    text = "".join(capfd.readouterr())
    check_ddp(ti, admin, namespace, claim, "native", text)
    assert f"(master {xcom(ti)['job_name']}-worker-0." in text  # MASTER_ADDR: <job>-worker-0.<service>


@pytest.mark.parametrize("backend", ["jobset", "kubeflow", "trainer"])
def test_ddp_under_each_controller(kube, admin, controllers, k8s_conn, dag_files, real_node, capfd, backend):
    namespace = kube.namespace
    claim, script = create_pvc(admin, namespace), create_script(admin, namespace, DDP)
    ti = run(dag_files, k8s_conn, ddp_job(script, claim, backend), backend, deferrable=True)
    check_ddp(ti, admin, namespace, claim, backend, "".join(capfd.readouterr()))
