"""DLCJobOperator with backend="pai", end to end with real Airflow (dag.test), through the
SDK's real client against the local STAND-IN for the DLC API (tests/support/dlc_standin.py).

The DAGs are the ones a user writes for any backend, but for backend= and conn_id=.
dag.test runs the sync path in this process, and the deferred path's trigger inline.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from dlc_airflow import naming
from dlc_airflow.status import JobState
from tests.airflow.test_operator_dagtest import xcom
from tests.pai.conftest import SECRETS, WORKSPACE, connection

LOG = 'epoch 1 loss 0.5\nDLC_METRICS {"loss": 0.25}'


def training(**env) -> dict:
    return {"type": "pytorch", "image": "registry/train:1", "command": ["python", "train.py"],
            "roles": {"master": 1, "worker": 2}, "resources": {"cpu": "4", "memory": "16Gi"},
            "env": {"STANDIN_RUN_SECONDS": "1", "STANDIN_LOG": LOG, **env}}


def jobs_of(standin, dag_id: str) -> list[dict]:
    with standin._lock:
        return [standin.view(j) for j in standin.jobs.values()
                if j.tags.get(naming.LABEL_DAG) == dag_id and not j.deleted]


def no_secrets(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, "a credential reached the output"


def stored_values(ti) -> str:
    """Everything Airflow stored for the task: its XComs and rendered fields."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        xcoms = session.query(XComModel).filter_by(dag_id=ti.dag_id, run_id=ti.run_id).all()
        rendered = session.query(RenderedTaskInstanceFields).filter_by(dag_id=ti.dag_id, run_id=ti.run_id).all()
        return json.dumps([str(x.value) for x in xcoms] + [json.dumps(r.rendered_fields, default=str) for r in rendered])


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_success(standin, pai_conn, dag_files, deferrable, capfd):
    dag = dag_files.operator_dag(backend="pai", conn_id=pai_conn, job=training(), deferrable=deferrable)
    lists_before, gets_before = standin.count("ListJobs"), standin.count("GetJob")
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success", ti.state
    result = xcom(ti)
    assert result["backend"] == "pai" and result["state"] == "SUCCEEDED" and result["namespace"] == WORKSPACE
    assert result["uid"].startswith("dlc") and result["attempt"] == 1
    assert result["roles"]["master"]["succeeded"] == 1 and result["roles"]["worker"]["succeeded"] == 2
    assert result["metrics"] == {"loss": 0.25} and result["running_seconds"] is not None
    [job] = jobs_of(standin, dag.dag_id)
    assert job["DisplayName"] == result["job_name"] and job["Status"] == "Succeeded"
    assert job["Settings"]["Tags"][naming.LABEL_TASK] == "train"
    text = "".join(capfd.readouterr())
    assert "[master-0] epoch 1 loss 0.5" in text
    assert standin.count("ListJobs") > lists_before  # the shared poller's lists, not per-job GetJob polling
    no_secrets(text)
    no_secrets(stored_values(ti))
    if deferrable:  # waited in the trigger, on the workspace's shared poller
        assert f"waiting on job {result['job_name']} in {WORKSPACE}" in text
    assert standin.count("GetJob") - gets_before < 15  # a handful of reads, never one per poll


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_failure_fails_the_task(standin, pai_conn, dag_files, deferrable, capfd):
    dag = dag_files.operator_dag(backend="pai", conn_id=pai_conn, job=training(STANDIN_OUTCOME="fail"),
                                 deferrable=deferrable)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "exited with code 3" in text and "failed" in text.lower()
    assert [j["Status"] for j in jobs_of(standin, dag.dag_id)] == ["Failed"]


@pytest.mark.airflow
def test_sts_credentials(standin, dag_files, monkeypatch, capfd):
    conn_id = f"pai_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection(standin, sts=True)))
    dag = dag_files.operator_dag(backend="pai", conn_id=conn_id, job=training(), deferrable=False)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success"
    no_secrets("".join(capfd.readouterr()))


@pytest.mark.airflow
def test_a_spec_dlc_refuses_at_run_time_fails_at_once_and_creates_nothing(standin, pai_conn, dag_files, capfd):
    # renders fine at parse time; the template renders into a priority DLC does not have
    spec = training()
    spec["scheduling"] = {"priority_class": "{{ 'urgent' }}"}
    dag = dag_files.operator_dag(backend="pai", conn_id=pai_conn, job=spec, deferrable=False)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    assert "scheduling.priority_class" in "".join(capfd.readouterr())
    assert jobs_of(standin, dag.dag_id) == []


LOST_WORKER_DAG = '''
import json
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator


class LosesItsWorker(DLCJobOperator):
    """Try 1 submits, then its worker dies before waiting: no cleanup, no stop (as SIGKILL)."""

    def _wait(self, context, runner, ref, status):
        if context["ti"].try_number == 1:
            raise RuntimeError("worker lost")
        return super()._wait(context, runner, ref, status)

    def _stop_after_error(self, runner, ref):
        pass  # a killed worker stops nothing


with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 1, "retry_delay": timedelta(seconds=0)}}) as dag:
    LosesItsWorker(task_id="train", **json.loads({kwargs!r}))
'''


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_retry_adopts_the_running_job(standin, pai_conn, dag_files, deferrable, capfd):
    dag_id = f"t_{uuid.uuid4().hex[:8]}"
    kwargs = {"backend": "pai", "conn_id": pai_conn, "job": training(STANDIN_RUN_SECONDS="2"), "deferrable": deferrable}
    dag = dag_files(dag_id, LOST_WORKER_DAG.format(dag_id=dag_id, kwargs=json.dumps(kwargs)))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success" and ti.try_number == 2
    text = "".join(capfd.readouterr())
    assert "adopting job" in text and text.count("submitted job ") == 1
    [job] = jobs_of(standin, dag_id)  # exactly one DLC job for the task instance
    result = xcom(ti)
    assert result["uid"] == job["JobId"] and result["attempt"] == 1 and result["state"] == "SUCCEEDED"
    assert job["Settings"]["Tags"]["dlc-airflow/claimed-try"] == "2"  # try 2 claimed it


# -- kill: the operator's and the trigger's on_kill, with the real SDK and the stand-in --------------
def _running_job(standin, runner, task: str = "train"):
    from dlc_airflow.spec import DLCJob

    who = naming.TaskIdentity("killdag", task, f"run-{uuid.uuid4().hex[:8]}", try_number=1)
    job = DLCJob.model_validate(training(STANDIN_RUN_SECONDS="120"))
    ref, _ = runner.submit(job, naming.job_name(task, who, 1), who, 1)
    runner.claim(ref, 1)
    return ref


def _wait_state(runner, ref, state, timeout=15.0):
    deadline = time.monotonic() + timeout
    while runner.status(ref).state is not state:
        assert time.monotonic() < deadline, runner.status(ref).summary()
        time.sleep(0.1)


def test_operator_on_kill_stops_the_job(standin, pai_conn):
    from dlc_airflow.operators import DLCJobOperator

    from dlc_airflow.airflow.runners import make_runner

    runner = make_runner("pai", pai_conn, None)
    ref = _running_job(standin, runner)
    op = DLCJobOperator(task_id="train", backend="pai", conn_id=pai_conn, job=training())
    op._ref, op._runner, op._try = ref, runner, 1  # what execute() holds while it waits
    stops = standin.count("StopJob")
    op.on_kill()
    assert standin.count("StopJob") == stops + 1
    _wait_state(runner, ref, JobState.STOPPED)


def test_trigger_on_kill_stops_the_job_unless_a_newer_try_adopted_it(standin, pai_conn):
    from dlc_airflow.airflow.runners import make_runner
    from dlc_airflow.airflow.trigger import DLCJobTrigger

    runner = make_runner("pai", pai_conn, None)
    ref = _running_job(standin, runner)
    runner.claim(ref, 2)  # a newer try took it over: try 1's kill must not stop it
    asyncio.run(DLCJobTrigger(ref=ref.to_dict(), conn_id=pai_conn, try_number=1).on_kill())
    assert runner.status(ref).state is not JobState.STOPPED and runner.status(ref).reason != "Stopping"
    asyncio.run(DLCJobTrigger(ref=ref.to_dict(), conn_id=pai_conn, try_number=2).on_kill())
    _wait_state(runner, ref, JobState.STOPPED)


# -- kill through the real scheduler, triggerer and API server ------------------------------------
STACK_DAG = '''
import json
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    DLCJobOperator(task_id="train", conn_id="pai", backend="pai", **json.loads({kwargs!r}))
'''


@pytest.mark.airflow
@pytest.mark.slow
def test_killing_the_task_stops_the_dlc_job(standin, tmp_path):
    """A user marks the running (sync) and the deferred task failed: Airflow kills the task
    (operator on_kill in the worker, trigger on_kill in the triggerer) and the job is stopped
    with StopJob."""
    from tests.airflow.test_scheduler_reliability import mark_failed, trigger, wait
    from tests.support.airflow_stack import AirflowStack

    dags = tmp_path / "dags"
    dags.mkdir()
    ids = {mode: f"pai_kill_{mode}_{uuid.uuid4().hex[:6]}" for mode in ("sync", "deferred")}
    for mode, dag_id in ids.items():
        kwargs = {"job": training(STANDIN_RUN_SECONDS="600"), "deferrable": mode == "deferred"}
        (dags / f"{dag_id}.py").write_text(STACK_DAG.format(dag_id=dag_id, kwargs=json.dumps(kwargs)))
    stack = AirflowStack(tmp_path / "home", dags, components=("api-server", "scheduler", "dag-processor", "triggerer"),
                         env={"AIRFLOW_CONN_PAI": json.dumps(connection(standin))})
    with stack:
        for mode, dag_id in ids.items():
            stack.wait_for_dag(dag_id)
            stack.airflow("dags", "unpause", dag_id)
            run_id = trigger(stack, dag_id)
            stack.wait_for_task(dag_id, run_id, "train", {"deferred" if mode == "deferred" else "running"},
                                timeout=150)
            [job] = wait(lambda d=dag_id: [j for j in jobs_of(standin, d) if j["Status"] == "Running"], 60,
                         f"the {mode} task's DLC job to run")
            # the waiting side (the worker's follower, or the trigger once the triggerer runs it)
            # follows the job: Airflow only calls a trigger's on_kill once the trigger runs
            wait(lambda j=job["JobId"]: any(r["action"] == "ListJobs" and j in r["query"] for r in standin.requests),
                 60, f"the {mode} task to follow its job")
            time.sleep(1)
            mark_failed(stack, dag_id, run_id)
            wait(lambda d=dag_id: [j for j in jobs_of(standin, d) if j["Status"] == "Stopped"], 60,
                 f"the {mode} task's DLC job to be stopped")
            assert stack.task_instance(dag_id, run_id, "train")["state"] == "failed"
            assert standin.live_jobs(WORKSPACE) == [] or all(j["JobId"] != job["JobId"] for j in standin.live_jobs())
            no_secrets(stack.task_log(dag_id, run_id, "train"))
        no_secrets(stack.log("triggerer") + stack.log("scheduler"))
