"""No duplicate job for one task instance, through the real scheduler, triggerer, dag-processor
and API server (LocalExecutor, SQLite): the triggerer dies while a task is deferred; a worker
dies in the middle of submitting; a user kills a running and a deferred task; the scheduler
declares a running try lost and retries it while the old try still runs (issue 25 part 5)."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
import uuid

import psutil
import pytest

from dlc_airflow.k8s.kinds import JOB
from dlc_airflow.naming import LABEL_JOB, MANAGED_BY
from tests.airflow.conftest import restricted_kubeconfig
from tests.airflow.test_operator_dagtest import stopped_and_kept
from tests.support.airflow_stack import AirflowStack

RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"

DAG = '''
import json
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": {retries}, "retry_delay": timedelta(seconds={retry_delay})}}) as dag:
    DLCJobOperator(task_id="train", conn_id="dlc", backend="native", **json.loads({kwargs!r}))
'''


def job(run_for: str) -> dict:
    return {"type": "pytorch", "image": "registry.local/train:1", "command": ["python", "train.py"],
            "roles": {"worker": 2}, "annotations": {RUN_FOR: run_for}}


@pytest.fixture
def stack_for(cluster, namespace, tmp_path):
    """An Airflow stack whose `dlc` connection reaches the test namespace (optionally through a proxy)."""
    stacks = []

    def make(dag_id: str, *, retries: int = 0, retry_delay: int = 1, components=("api-server", "scheduler", "dag-processor", "triggerer"),
             proxy=None, env=None, **op_kwargs) -> AirflowStack:
        dags = tmp_path / "dags"
        dags.mkdir(exist_ok=True)
        (dags / f"{dag_id}.py").write_text(DAG.format(dag_id=dag_id, retries=retries, retry_delay=retry_delay,
                                                      kwargs=json.dumps(op_kwargs)))
        kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / "kubeconfig.json",
                                           server=proxy.url if proxy else None,
                                           ca_file=proxy.ca_file if proxy else None)
        conn = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})
        stack = AirflowStack(tmp_path / "home", dags, components=components, env={
            "AIRFLOW_CONN_DLC": conn,
            # a dead worker is noticed within seconds, not the default 5 minutes
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            **(env or {})})
        stack.start()
        stacks.append(stack)
        stack.wait_for_dag(dag_id)
        stack.airflow("dags", "unpause", dag_id)
        return stack

    yield make
    for stack in stacks:
        stack.stop()


def trigger(stack: AirflowStack, dag_id: str) -> str:
    run_id = f"manual__{uuid.uuid4().hex[:8]}"
    stack.airflow("dags", "trigger", dag_id, "--run-id", run_id)
    return run_id


def jobs_of(kube) -> dict[str, list[dict]]:
    """Live job objects by dlc-airflow job name."""
    by_job: dict[str, list[dict]] = {}
    for obj in kube.list(JOB, labels={MANAGED_BY: "dlc-airflow"})[0]:
        by_job.setdefault(obj["metadata"]["labels"][LABEL_JOB], []).append(obj)
    return by_job


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def xcom(stack: AirflowStack, dag_id: str, run_id: str) -> dict:
    rows = stack.query("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'train' "
                       "AND key = 'return_value'", dag_id, run_id)
    value = rows[0]["value"]
    while isinstance(value, (str, bytes)):  # stored as JSON text (of JSON text, depending on the backend)
        value = json.loads(value)
    return value


@pytest.mark.parametrize("job_ends_while_down", [False, True], ids=["job-outlives-outage", "job-ends-during-outage"])
def test_triggerer_killed_while_deferred(stack_for, kube, job_ends_while_down):
    dag_id = f"trg_{uuid.uuid4().hex[:6]}"
    stack = stack_for(dag_id, job=job("12s" if job_ends_while_down else "30s"), deferrable=True)
    run_id = trigger(stack, dag_id)
    stack.wait_for_task(dag_id, run_id, "train", {"deferred"}, timeout=180)
    names = wait(lambda: list(jobs_of(kube)), 60, "the job")
    stack.kill("triggerer")  # SIGKILL: no cleanup, no on_kill
    time.sleep(20 if job_ends_while_down else 5)
    if job_ends_while_down:
        assert all(j["status"].get("succeeded") for objs in jobs_of(kube).values() for j in objs)
    assert stack.task_instance(dag_id, run_id, "train")["state"] == "deferred"
    stack.start("triggerer")
    stack.wait_for_runs(dag_id, 1, {"success"}, timeout=240)
    assert list(jobs_of(kube)) == names  # exactly one job, the first one
    result = xcom(stack, dag_id, run_id)
    assert result["state"] == "SUCCEEDED" and result["job_name"] == names[0] and result["attempt"] == 1
    assert stack.task_instance(dag_id, run_id, "train")["try_number"] == 1


def task_process(ti_id: str) -> psutil.Process | None:
    """The process running the task: its title is "airflow worker -- <task instance id>"."""
    wanted = str(uuid.UUID(str(ti_id)))  # SQLite keeps the id as 32 hex digits
    for proc in psutil.process_iter(["cmdline"]):
        if wanted in " ".join(proc.info["cmdline"] or []):
            return proc
    return None


def task_supervisor(ti_id: str) -> psutil.Process | None:
    """The supervisor of the process running the task (the executor's worker process that
    heartbeats for it): the parent of the one titled "airflow worker -- <id>"."""
    wanted = f"airflow worker -- {uuid.UUID(str(ti_id))}"
    for proc in psutil.process_iter(["cmdline"]):
        if " ".join(proc.info["cmdline"] or []).startswith(wanted):
            return proc.parent()
    return None


def test_worker_killed_mid_submit_retry_adopts(cluster, stack_for, kube):
    with cluster.fault_proxy() as proxy:
        # The create reaches the API server, its answer is held back: the worker is killed
        # while it waits for it, i.e. after the job exists and before the task knows.
        proxy.set(response_delay=60.0, methods=("POST",))
        dag_id = f"wrk_{uuid.uuid4().hex[:6]}"
        stack = stack_for(dag_id, retries=2, proxy=proxy, job=job("8s"), deferrable=False)
        run_id = trigger(stack, dag_id)
        names = wait(lambda: list(jobs_of(kube)), 180, "the job to be created")
        ti = stack.task_instance(dag_id, run_id, "train")
        # SIGKILL the process running the task (as the OOM killer would): no cleanup, no
        # on_kill; its supervisor reports the try failed and the scheduler retries it.
        wait(lambda: task_process(ti["id"]), 30, "the task process").send_signal(signal.SIGKILL)
        proxy.set()
        stack.wait_for_runs(dag_id, 1, {"success"}, timeout=300)
        final = stack.task_instance(dag_id, run_id, "train")
        assert final["try_number"] >= 2  # a retry ran...
        assert list(jobs_of(kube)) == names  # ...and adopted the job: still exactly one
        result = xcom(stack, dag_id, run_id)
        assert result["job_name"] == names[0] and result["state"] == "SUCCEEDED"
        assert "adopting job" in stack.task_log(dag_id, run_id, "train", try_number=final["try_number"]) \
            or "already succeeded" in stack.task_log(dag_id, run_id, "train", try_number=final["try_number"])


def mark_failed(stack: AirflowStack, dag_id: str, run_id: str) -> None:
    url = (f"http://127.0.0.1:{stack.port}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train")
    request = urllib.request.Request(url, method="PATCH", data=json.dumps({"new_state": "failed"}).encode(),
                                     headers={"Content-Type": "application/json", **_auth(stack)})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _auth(stack: AirflowStack) -> dict[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{stack.port}/auth/token", method="GET")
    with urllib.request.urlopen(request, timeout=30) as response:
        token = json.loads(response.read())["access_token"]
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_killing_the_task_stops_the_job(stack_for, kube, deferrable):
    dag_id = f"kil_{uuid.uuid4().hex[:6]}"
    stack = stack_for(dag_id, job=job("600s"), deferrable=deferrable)
    run_id = trigger(stack, dag_id)
    stack.wait_for_task(dag_id, run_id, "train", {"deferred" if deferrable else "running"}, timeout=180)
    wait(lambda: jobs_of(kube), 60, "the job")
    time.sleep(2)
    mark_failed(stack, dag_id, run_id)
    wait(lambda: stopped_and_kept(kube), 120, "the job to be stopped (and kept, STOPPED)")
    assert stack.task_instance(dag_id, run_id, "train")["state"] == "failed"


def test_a_try_the_scheduler_superseded_leaves_its_job_to_the_next(stack_for, kube):
    """The superseded-try race a soak found: the scheduler stops hearing from try 1 (its
    supervisor is frozen, as a stalled worker would be), declares it lost and schedules try 2.
    When try 1 comes back, Airflow kills it ("the task shouldn't be running anymore"): its
    on_kill must leave the job to try 2, which adopts it; before the fix it stopped the job,
    and try 2 either submitted a second one or failed on the stopped one."""
    dag_id = f"sup_{uuid.uuid4().hex[:6]}"
    stack = stack_for(dag_id, retries=1, retry_delay=30, job=job("150s"), deferrable=False)
    run_id = trigger(stack, dag_id)
    stack.wait_for_task(dag_id, run_id, "train", {"running"}, timeout=180)
    names = wait(lambda: list(jobs_of(kube)), 60, "the job")
    first = stack.task_instance(dag_id, run_id, "train")
    # frozen once the try waits (not in the middle of its own call to the supervisor, which
    # would hold the channel its kill asks Airflow through: it then stops the job, as before)
    wait(lambda: "RUNNING" in stack.task_log(dag_id, run_id, "train"), 60, "the wait's first status")
    supervisor = wait(lambda: task_supervisor(first["id"]), 30, "the task's supervisor")
    supervisor.suspend()  # SIGSTOP: no heartbeats; the task process itself goes on waiting
    try:
        stack.wait_for_task(dag_id, run_id, "train", {"up_for_retry"}, timeout=120)
    finally:
        supervisor.resume()
    stack.wait_for_runs(dag_id, 1, {"success"}, timeout=400)
    final = stack.task_instance(dag_id, run_id, "train")
    assert final["try_number"] == 2, final
    assert list(jobs_of(kube)) == names  # one job: try 1 did not stop it, try 2 adopted it
    result = xcom(stack, dag_id, run_id)
    assert (result["job_name"], result["attempt"], result["state"]) == (names[0], 1, "SUCCEEDED")
    killed = stack.task_log(dag_id, run_id, "train", try_number=1)
    assert "is left to the next try" in killed, killed[-3000:]
    assert "adopting job" in stack.task_log(dag_id, run_id, "train", try_number=2)
