"""A Kueue preemption as the task sees it, through real Airflow (dag.test, deferred) and the real
Kueue and JobSet: team-a's job runs on GPUs it borrowed from team-b, team-b claims them back,
and the task either says so and waits for its job to run again (restart_on_preemption, the
default) or fails with Kueue's message and stops its job (restart_on_preemption off)."""

from __future__ import annotations

import threading

import pytest

from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import JOBSET, POD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import LABEL_JOB
from tests.airflow.test_operator_dagtest import wait_until
from tests.cluster.polling import wait_for
from tests.cluster.specs import IDENTITY, unique_name
from tests.cluster.test_kueue_preemption import gpu_job, on_demand_gpus


def reclaim_when_running(admin, runner: KubeRunner, errors: list) -> threading.Thread:
    """Once the task's job runs (its pods), team-b asks for its own 12 GPUs: 4 are team-a's."""
    def run() -> None:
        try:
            wait_for(lambda: [p for p in admin.list(POD, runner.namespace)[0]
                              if LABEL_JOB in p["metadata"].get("labels", {})
                              and (p.get("status") or {}).get("phase") == "Running"],
                     timeout=120, what="the task's job to run")
            runner.submit(gpu_job(3, 4, "team-b", run_for="3s"), unique_name("owner"), IDENTITY, 1)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("restart", [True, False], ids=["restarts", "fails"])
def test_a_preempted_task_restarts_or_fails_per_its_fault_tolerance(
        kube, admin, controllers, namespace, policed_conn, dag_files, capfd, restart):
    wait_for(lambda: not any(on_demand_gpus(admin, team)["total"] for team in ("team-a", "team-b")), timeout=120,
             what="the teams' GPUs to be free")
    conn_id = policed_conn({})
    job = gpu_job(2, 8, "team-a", run_for="20s", restart_on_preemption=restart)  # 4 GPUs borrowed
    dag = dag_files.operator_dag(conn_id=conn_id, backend="jobset", job=job.to_dict(), deferrable=True)
    errors: list = []
    thread = reclaim_when_running(admin, KubeRunner(kube, get_backend("jobset")), errors)
    ti = dag.test().get_task_instance("train")
    thread.join(timeout=10)
    assert not errors, errors
    text = "".join(capfd.readouterr())
    assert "Kueue: Preempted to accommodate a workload" in text and "reclamation within the cohort" in text, \
        text[-3000:]
    if restart:
        assert ti.state == "success", text[-3000:]
        assert "was preempted and requeued (1 restart so far)" in text
    else:
        assert ti.state == "failed"
        assert "FAILED (Preempted)" in text and "restart_on_preemption is off" in text
        wait_until(lambda: not [j for j in kube.list(JOBSET)[0] if j["metadata"]["name"].startswith("train-")],
                   "the preempted job to be stopped")
