"""DLCJobOperator end to end with real Airflow (dag.test) on the real control plane.

dag.test runs tasks in this process and a deferred task's trigger inline, then resumes it:
both the sync and the deferrable path run for real against the API server, as the
restricted identity. Pods run on kwok nodes for the time in their annotation.
"""

from __future__ import annotations

import time

import pytest

from dlc_airflow.airflow.compat import DEGRADED, OFFERS
from dlc_airflow.k8s.backends.base import STOPPED_ANNOTATION
from dlc_airflow.k8s.kinds import JOB, POD, SERVICE
from dlc_airflow.naming import MANAGED_BY
from dlc_airflow.spec import DLCJob
from tests.support.cluster import pod_logs

RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"


def training_job(run_for: str = "2s", **overrides) -> DLCJob:
    spec = dict(type="pytorch", image="registry.local/train:1", command=["python", "train.py"],
                roles={"master": 1, "worker": 2}, annotations={RUN_FOR: run_for})
    spec.update(overrides)
    return DLCJob(**spec)


def run_dag(dag_files, conn_id: str, job: DLCJob, **op_kwargs):
    dag = dag_files.operator_dag(conn_id=conn_id, backend="native", job=job.to_dict(), **op_kwargs)
    dag_run = dag.test()
    return dag_run, dag_run.get_task_instance("train")


def xcom(ti, key="return_value"):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id,
                                                 key=key).one_or_none()
        return None if row is None else XComModel.deserialize_value(row)


def wait_until(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def managed(kube, kind):
    return kube.list(kind, labels={MANAGED_BY: "dlc-airflow"})[0]


def stopped_and_kept(kube, kind=JOB) -> bool:
    """The job's objects are there, each marked stopped (its status reads STOPPED), and none of
    its pods runs: stopped, as on every backend, and kept (on_finish='keep')."""
    objects = managed(kube, kind)
    running = [p for p in managed(kube, POD) if (p.get("status") or {}).get("phase") in ("Pending", "Running")
               and not p["metadata"].get("deletionTimestamp")]
    return bool(objects) and all(STOPPED_ANNOTATION in (o["metadata"].get("annotations") or {}) for o in objects) \
        and not running


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_success(kube, k8s_conn, dag_files, deferrable):
    from dlc_airflow.k8s.watch import REGISTRY

    dag_run, ti = run_dag(dag_files, k8s_conn, training_job(), deferrable=deferrable)
    assert ti.state == "success", ti.state
    result = xcom(ti)
    assert result["state"] == "SUCCEEDED" and result["namespace"] == kube.namespace
    assert result["roles"]["master"]["succeeded"] == 1 and result["roles"]["worker"]["succeeded"] == 2
    assert result["running_seconds"] is not None
    jobs = managed(kube, JOB)
    assert {j["metadata"]["name"] for j in jobs} == {f"{result['job_name']}-master", f"{result['job_name']}-worker"}
    assert kube.get(SERVICE, result["job_name"]) is not None
    for job in jobs:
        labels = job["metadata"]["labels"]
        assert labels["dlc-airflow/dag-id"] == dag_run.dag_id and labels["dlc-airflow/task-id"] == "train"
    if deferrable:  # the trigger ran in this process and waited through a shared watch
        assert any(key[1] == kube.namespace for key in REGISTRY.watches())


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_user_code_failure_fails_the_task_with_the_exit_code(kube, k8s_conn, dag_files, deferrable, capfd):
    job = training_job(labels={CHAOS: "true"},
                       annotations={f"{CHAOS}/exit-code": "3", f"{CHAOS}/delay": "1s"},
                       fault_tolerance={"retryable_exit_codes": [1], "max_restarts": 2})
    _, ti = run_dag(dag_files, k8s_conn, job, deferrable=deferrable)
    assert ti.state == "failed"
    out = capfd.readouterr()
    text = out.out + out.err
    assert "PodFailurePolicy" in text and "exit code 3" in text
    # nothing is restarted for a non-retryable exit code
    assert all(j["status"].get("failed", 0) <= 3 for j in managed(kube, JOB))


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_timeout_stops_the_job(kube, k8s_conn, dag_files, deferrable, capfd):
    _, ti = run_dag(dag_files, k8s_conn, training_job(run_for="600s"), deferrable=deferrable, timeout=4)
    assert ti.state == "failed"
    assert "did not finish within timeout" in "".join(capfd.readouterr())
    wait_until(lambda: stopped_and_kept(kube), "the job stopped and kept, nothing of it running")
    assert xcom(ti, "dlc_job")["place"] == kube.namespace


def test_timeout_with_on_finish_delete_stops_and_deletes_the_job(kube, k8s_conn, dag_files, capfd):
    _, ti = run_dag(dag_files, k8s_conn, training_job(run_for="600s"), deferrable=False, timeout=4,
                    on_finish="delete")
    assert ti.state == "failed" and "did not finish within timeout" in "".join(capfd.readouterr())
    assert managed(kube, JOB) == [] and managed(kube, SERVICE) == []


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_queue_timeout_fails_with_the_schedulers_reason(kube, k8s_conn, dag_files, deferrable, capfd):
    job = training_job(resources={"gpu": 64}, roles={"worker": 1})
    _, ti = run_dag(dag_files, k8s_conn, job, deferrable=deferrable, queue_timeout=5)
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "was not scheduled within queue_timeout" in text
    assert "Insufficient nvidia.com/gpu" in text
    assert "[event] Pod " in text and "FailedScheduling" in text  # the scheduler's Event, in the task log
    wait_until(lambda: stopped_and_kept(kube), "the job stopped and kept, its pods gone")


def test_logs_and_outputs_reach_the_task(kube, admin, k8s_conn, dag_files, capfd, tmp_path):
    """Pod logs stream into the task log with replica prefixes; the termination message the
    runtime writes becomes the XCom's metrics/outputs."""
    message = '{"metrics": {"loss": 0.25}, "outputs": {"checkpoint": "s3://b/ckpt/step-9"}}'
    job = training_job(run_for="6s", roles={"worker": 1},
                       annotations={RUN_FOR: "6s", "pod-complete.stage.kwok.x-k8s.io/message": message})
    log_file = tmp_path / "train.log"
    log_file.write_text("2026-12-02T10:00:00.000000000Z stdout F epoch 1 loss 0.5\n")
    undo = pod_logs(admin, kube.namespace, log_file)
    try:
        _, ti = run_dag(dag_files, k8s_conn, job, deferrable=False)
    finally:
        undo()
    assert ti.state == "success"
    assert "[worker-0] epoch 1 loss 0.5" in "".join(capfd.readouterr())
    result = xcom(ti)
    assert result["metrics"] == {"loss": 0.25}
    assert result["outputs"] == {"checkpoint": "s3://b/ckpt/step-9"}



@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_on_finish_delete_removes_the_job_after_taking_its_result(kube, k8s_conn, dag_files, deferrable):
    _, ti = run_dag(dag_files, k8s_conn, training_job(), deferrable=deferrable, on_finish="delete")
    assert ti.state == "success"
    assert xcom(ti)["state"] == "SUCCEEDED"
    assert managed(kube, JOB) == [] and managed(kube, SERVICE) == []


FLAKY_DAG = '''
import json
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator


class FailsOnceAfterSuccess(DLCJobOperator):
    """The job succeeds and is deleted; then the first try dies before it is recorded."""

    def post_execute(self, context, result=None):
        if context["ti"].try_number == 1:
            raise RuntimeError("worker lost after the job succeeded")


with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 1, "retry_delay": timedelta(seconds=0)}}) as dag:
    FailsOnceAfterSuccess(task_id="train", **json.loads({kwargs!r}))
'''


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_retry_takes_the_result_recorded_in_the_task_state_store(kube, k8s_conn, dag_files, capfd, deferrable):
    """Durable execution (Airflow 3.3 task state store): the job is gone (on_finish=delete),
    yet the retry takes its recorded result instead of training again. The deferred path
    records it when the task resumes from the trigger, as the sync path does. Airflow 3.1 and
    3.2 have no store: the retry finds no job by its labels and trains again, and says why."""
    import json
    import uuid

    dag_id = f"t_{uuid.uuid4().hex[:8]}"
    kwargs = {"conn_id": k8s_conn, "backend": "native", "job": training_job().to_dict(),
              "deferrable": deferrable, "on_finish": "delete"}
    dag = dag_files(dag_id, FLAKY_DAG.format(dag_id=dag_id, kwargs=json.dumps(kwargs)))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success" and ti.try_number == 2
    text = "".join(capfd.readouterr())
    if OFFERS.task_state_store:
        assert text.count("submitted job ") == 1  # only the first try submitted
        assert "already succeeded (recorded in the task state store)" in text
    else:  # Airflow 3.1, 3.2: no store, and the deleted job's labels find nothing: it trains again
        assert text.count("submitted job ") == 2
        assert text.count(DEGRADED["task_state_store"]) == 2, text[-3000:]  # once in each try's log
    assert xcom(ti)["state"] == "SUCCEEDED" and managed(kube, JOB) == []


FAILS_AFTER_SUBMIT_DAG = '''
import json
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator


class FailsAfterSubmit(DLCJobOperator):
    """Something goes wrong on the worker once the job runs (not the job's own failure)."""

    def _wait(self, context, runner, ref, status):
        raise RuntimeError("the worker lost its way after submitting")


with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    FailsAfterSubmit(task_id="train", **json.loads({kwargs!r}))
'''


def test_a_task_that_fails_after_submitting_stops_its_job(kube, k8s_conn, dag_files, capfd):
    """Issue 13 4g: any error past the submit stops the job (last try too): no job runs on
    unattended after its task has failed."""
    import json
    import uuid

    dag_id = f"t_{uuid.uuid4().hex[:8]}"
    kwargs = {"conn_id": k8s_conn, "backend": "native", "job": training_job("600s").to_dict()}
    dag = dag_files(dag_id, FAILS_AFTER_SUBMIT_DAG.format(dag_id=dag_id, kwargs=json.dumps(kwargs)))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "the worker lost its way" in text and "stopping the job" in text
    wait_until(lambda: stopped_and_kept(kube), "the job to be stopped")


RETRIED_DAG = '''
import json
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 2, "retry_delay": timedelta(seconds=0)}}) as dag:
    DLCJobOperator(task_id="train", **json.loads({kwargs!r}))
'''


@pytest.mark.parametrize("problem", ["bad-token", "forbidden-namespace"])
def test_auth_errors_fail_the_task_without_retries(cluster, namespace, kube, dag_files, tmp_path, monkeypatch,
                                                   capfd, problem):
    """Issue 13 4d: a 401 (bad token) or a 403 (a namespace the Role is not bound in) fails
    the task at once - no Airflow retries - naming the connection and the identity."""
    import json
    import uuid

    from tests.airflow.conftest import restricted_kubeconfig

    conn_id = f"dlc_{uuid.uuid4().hex[:8]}"
    path = restricted_kubeconfig(cluster, namespace if problem == "bad-token" else "default",
                                 tmp_path / "kubeconfig.json")
    if problem == "bad-token":
        config = json.loads(path.read_text())
        config["users"][0]["user"]["token"] = "not-a-valid-token"
        path.write_text(json.dumps(config))
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(path)}}))
    dag_id = f"t_{uuid.uuid4().hex[:8]}"
    kwargs = {"conn_id": conn_id, "backend": "native", "job": training_job().to_dict(), "deferrable": False}
    dag = dag_files(dag_id, RETRIED_DAG.format(dag_id=dag_id, kwargs=json.dumps(kwargs)))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed" and ti.try_number == 1  # no retry
    text = "".join(capfd.readouterr())
    assert f"connection {conn_id!r}" in text
    assert ("401" in text) if problem == "bad-token" else ("may not" in text and "dlc-airflow" in text)
    assert managed(kube, JOB) == []
