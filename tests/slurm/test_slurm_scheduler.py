"""backend="slurm" through the REAL scheduler, triggerer, dag-processor and API server
(LocalExecutor, SQLite) on the real local Slurm: a user killing a running and a deferred task
cancels its Slurm job; a task process SIGKILLed mid-wait is retried and the retry adopts the
job it had submitted (still exactly one Slurm job); and a retraining pipeline backfills three
intervals on Slurm, each resuming from its predecessor, with the lineage on a shared folder.

One Airflow stack serves the module (its start is the slow part); each test has its DAG."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dlc_airflow.pipelines.lineage import Interval
from tests.airflow.test_scheduler_reliability import mark_failed, task_process, trigger, wait, xcom
from tests.pipelines import fakejobs
from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]
REPO = str(Path(__file__).resolve().parents[2])

HOLD = textwrap.dedent("""
    import os, time
    print(f"replica {os.environ['DLC_ROLE']}-{os.environ['DLC_ROLE_INDEX']} holding", flush=True)
    time.sleep(float(os.environ["HOLD"]))
""")

OPERATOR_DAG = '''
import json
from datetime import datetime, timedelta, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": {retries}, "retry_delay": timedelta(seconds=1)}}) as dag:
    DLCJobOperator(task_id="train", backend="slurm", conn_id="dlc_slurm", **json.loads({kwargs!r}))
'''

PIPELINE_DAG = '''
from datetime import datetime, timezone
from dlc_airflow.pipelines import Gate, retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag(
    {dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    end_date=datetime(2026, 1, 3, tzinfo=timezone.utc), storage_root={root!r},
    **jobs({code!r}, {fail!r}, TRAIN_SECONDS="0.5"), gate=Gate("accuracy", 0.0), backend="slurm",
    conn_id="dlc_slurm", default_args={{"retries": 0}},
)
'''
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]
# Slurm remembers finished jobs (MinJobAge) across test sessions, and a run of the same dag id
# and run id would find (and reuse) an earlier session's job: dag ids of their own per session
SUFFIX = uuid.uuid4().hex[:6]
KILL_SYNC, KILL_DEFERRED, ADOPT, BACKFILL = (f"{n}_{SUFFIX}" for n in ("slurm_kill_sync", "slurm_kill_deferred",
                                                                       "slurm_adopt", "slurm_backfill"))


def hold_job(seconds: float) -> dict:
    return {"type": "pytorch", "image": "unused", "roles": {"worker": 2}, "env": {"HOLD": str(seconds)},
            "command": [sys.executable, "-c", HOLD]}


DAGS = {
    KILL_SYNC: dict(retries=0, job=hold_job(300), deferrable=False),
    KILL_DEFERRED: dict(retries=0, job=hold_job(300), deferrable=True),
    ADOPT: dict(retries=2, job=hold_job(35), deferrable=False),
}


@pytest.fixture(scope="module")
def stack(slurm, job_root, tmp_path_factory):
    home = tmp_path_factory.mktemp("slurm-stack")
    dags = home / "dags"
    dags.mkdir()
    for dag_id, kwargs in DAGS.items():
        retries = kwargs.pop("retries")
        (dags / f"{dag_id}.py").write_text(OPERATOR_DAG.format(dag_id=dag_id, retries=retries,
                                                                kwargs=json.dumps(kwargs)))
    shared = home / "shared"  # the lineage's folder: the nodes and the Airflow side see it
    (shared / "fail").mkdir(parents=True)
    (dags / f"{BACKFILL}.py").write_text(PIPELINE_DAG.format(
        dag_id=BACKFILL, root=f"file://{shared / 'lineage'}", code=str(fakejobs.write(shared / "code")), fail=str(shared / "fail")))
    with AirflowStack(home / "home", dags, components=("api-server", "scheduler", "dag-processor", "triggerer"),
                      env={"AIRFLOW_CONN_DLC_SLURM": slurm.connection(job_root), "PYTHONPATH": REPO,
                           # a dead task process is noticed within seconds, not the default 5 minutes
                           "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "10"}) as s:
        for dag_id in [*DAGS, BACKFILL]:
            s.wait_for_dag(dag_id)
        s.shared = shared
        yield s


def jobs_of(slurm, dag_id: str) -> list:
    return [r for r in slurm.jobs() if f'"dag-id":"{dag_id}"' in r.comment]


def live_jobs_of(slurm, dag_id: str) -> list:
    return [r for r in jobs_of(slurm, dag_id) if r.state in ("PENDING", "RUNNING", "SUSPENDED")]


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_killing_the_task_cancels_the_slurm_job(stack, slurm, deferrable):
    dag_id = KILL_DEFERRED if deferrable else KILL_SYNC
    stack.airflow("dags", "unpause", dag_id)
    run_id = trigger(stack, dag_id)
    stack.wait_for_task(dag_id, run_id, "train", {"deferred" if deferrable else "running"}, timeout=180)
    wait(lambda: [j for j in jobs_of(slurm, dag_id) if j.state == "RUNNING"], 60, "the Slurm job to run")
    time.sleep(1)
    mark_failed(stack, dag_id, run_id)
    wait(lambda: not live_jobs_of(slurm, dag_id), 60, "the Slurm job to be cancelled")
    # slurmctld reports the job in a passing state (completing) for a moment: wait for its last
    wait(lambda: [j.state for j in jobs_of(slurm, dag_id)] == ["CANCELLED"], 60,
         "the one Slurm job of the task to end CANCELLED")
    assert stack.task_instance(dag_id, run_id, "train")["state"] == "failed"


def test_task_killed_mid_wait_is_retried_and_adopts_its_job(stack, slurm):
    dag_id = ADOPT
    stack.airflow("dags", "unpause", dag_id)
    run_id = trigger(stack, dag_id)
    first = wait(lambda: [j for j in jobs_of(slurm, dag_id) if j.state == "RUNNING"], 180, "the Slurm job to run")
    ti = stack.task_instance(dag_id, run_id, "train")
    # SIGKILL the process running the task, as the OOM killer would: no cleanup, no on_kill
    wait(lambda: task_process(ti["id"]), 30, "the task process").send_signal(signal.SIGKILL)
    stack.wait_for_runs(dag_id, 1, {"success"}, timeout=240)
    final = stack.task_instance(dag_id, run_id, "train")
    assert final["try_number"] >= 2  # a retry ran...
    (job,) = jobs_of(slurm, dag_id)  # ...and adopted the job: still exactly one
    assert job.job_id == first[0].job_id and job.state == "COMPLETED"
    result = xcom(stack, dag_id, run_id)
    assert result["uid"] == str(job.job_id) and result["state"] == "SUCCEEDED" and result["attempt"] == 1
    log = stack.task_log(dag_id, run_id, "train", try_number=final["try_number"])
    assert "adopting job" in log or "already succeeded" in log
    assert f'"try":"{final["try_number"]}"' in job.comment or "already succeeded" in log  # the retry claimed it


def key(day: str) -> str:
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return Interval(start, start + timedelta(days=1)).key


def test_backfill_of_a_retraining_pipeline_on_slurm(stack, slurm):
    stack.airflow("dags", "unpause", BACKFILL)
    stack.airflow("backfill", "create", "--dag-id", BACKFILL, "--from-date", DAYS[0], "--to-date", DAYS[-1],
                  "--reprocess-behavior", "failed")
    runs = stack.wait_for_runs(BACKFILL, 3, states={"success"}, timeout=600)
    assert [r["run_type"] for r in runs] == ["backfill"] * 3
    doc = json.loads((stack.shared / "lineage" / BACKFILL / "lineage.json").read_text())
    keys = [key(d) for d in DAYS]
    assert [doc["intervals"][k]["resumed_from"] for k in keys] == [None, keys[0], keys[1]]
    for earlier, later in zip(keys, keys[1:], strict=False):  # each resumed from exactly its predecessor's checkpoint
        assert doc["intervals"][later]["resume_checkpoint"] == doc["intervals"][earlier]["checkpoint"]
    chain = json.loads((Path(doc["intervals"][keys[2]]["checkpoint"].removeprefix("file://")) / "chain.json").read_text())
    assert [c["interval"] for c in chain] == keys
    # every DLC task ran as a Slurm job: preprocess, train and inference of each interval
    names = {r.name.split("-")[0] for r in jobs_of(slurm, BACKFILL) if r.state == "COMPLETED"}
    assert names == {"preprocess", "train", "infer"}
    assert len([r for r in jobs_of(slurm, BACKFILL) if r.state == "COMPLETED"]) == 9
