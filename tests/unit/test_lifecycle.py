"""The task lifecycle: its start (the prelude the worker and the triggerer share, on the
in-memory FakeRunner), what a task publishes about its job, and the one outcome rule (the end
of a wait, and a wait read back after the trigger ended the task)."""

from __future__ import annotations

import json
import logging

import pytest

from dlc_airflow.airflow import links
from dlc_airflow.airflow.event import JobEvent
from dlc_airflow.airflow.keys import XCOM_REF
from dlc_airflow.airflow.lifecycle import StartRequest, identity_of, publication, start
from dlc_airflow.errors import BackendError
from dlc_airflow.finish import OnFinish, outcome_of, succeeded
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.kinds import JOBSET, kinds_detail
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.policy import PolicyError
from dlc_airflow.progress import Verdict, VerdictKind
from dlc_airflow.reasons import NOT_FOUND
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus
from dlc_airflow.submission import Action
from tests.support.fake_runner import FakeRunner

REF = JobRef(backend="jobset", place="ml", name="train-1a2b3c-1", uid="u-1", detail=kinds_detail([JOBSET]))
IDENTITY = TaskIdentity(dag_id="retrain", task_id="train", run_id="r1", map_index=2, try_number=3)


def test_publication_pushes_every_link_key_and_where_the_job_is():
    published = publication(REF, IDENTITY, "k8s_ml", None, {links.DASHBOARD_EXTRA: "https://d/{name}"},
                            "https://airflow.example.com")
    assert published.xcoms[XCOM_REF] == {**REF.to_dict(), "conn_id": "k8s_ml", "local_root": None, "try_number": 3}
    # every link's key, "" where it does not apply: Airflow reads them all when the task ends
    assert {k: v for k, v in published.xcoms.items() if k != XCOM_REF} == {
        "_link_DLCJobReportLink": "https://airflow.example.com/dlc/jobs/retrain/r1/train?map_index=2",
        "_link_DLCJobDashboardLink": "https://d/train-1a2b3c-1",
        "_link_DLCJobFolderLink": ""}
    assert published.where == {"dag_id": "retrain", "task_id": "train", "run_id": "r1", "map_index": 2,
                               "try_number": 3, "job": REF.name, "backend": "jobset", "namespace": "ml",
                               "link": "https://airflow.example.com/dlc/jobs/retrain/r1/train?map_index=2"}


def test_identity_of_takes_the_runs_clear_count():
    class TI:
        dag_id, task_id, run_id, map_index, try_number = "d", "t", "r", None, 2

    class Run:
        clear_number = 4

    assert identity_of(TI(), Run()) == TaskIdentity(dag_id="d", task_id="t", run_id="r", map_index=-1,
                                                    try_number=2, clear_number=4)
    assert identity_of(TI()).clear_number == 0


@pytest.mark.parametrize("kind,state,ok", [
    (VerdictKind.FINISHED, JobState.SUCCEEDED, True),
    (VerdictKind.FINISHED, JobState.FAILED, False),
    (VerdictKind.FINISHED, JobState.STOPPED, False),
    (VerdictKind.TIMEOUT, JobState.RUNNING, False),
    (VerdictKind.QUEUE_TIMEOUT, JobState.QUEUED, False),
])
def test_the_outcome_rule(kind, state, ok):
    verdict = Verdict(kind, JobStatus(state=state), f"job x {state.value.lower()}")
    outcome = outcome_of(REF, verdict, {"metrics": {"loss": 0.1}, "outputs": {}})
    assert succeeded(verdict) is ok and outcome.ok is ok
    assert outcome.error == (None if ok else verdict.message)
    assert outcome.result["metrics"] == {"loss": 0.1} and outcome.result["state"] == state.value


class ReadBack:
    """A runner that only answers status and outputs: what JobEvent.from_task_end asks."""

    def __init__(self, status: JobStatus) -> None:
        self._status = status

    def status(self, ref: JobRef) -> JobStatus:
        return self._status

    def outputs(self, ref: JobRef, pods: object = None) -> dict:
        return {"metrics": {"acc": 0.9}, "outputs": {}}


@pytest.mark.parametrize("payload,status,on_finish,ok", [
    ("success", JobStatus(state=JobState.SUCCEEDED), OnFinish.KEEP, True),
    ("failed", JobStatus(state=JobState.FAILED, reason="BackoffLimitExceeded"), OnFinish.KEEP, False),
    # the trigger took the result, then deleted the job as asked
    ("success", JobStatus(state=JobState.STOPPED, reason=NOT_FOUND), OnFinish.DELETE, True),
    # gone without on_finish=delete: not a success
    ("success", JobStatus(state=JobState.STOPPED, reason=NOT_FOUND), OnFinish.KEEP, False),
    ("failed", JobStatus(state=JobState.RUNNING), OnFinish.KEEP, False),
])
def test_a_wait_read_back_uses_the_same_rule(payload, status, on_finish, ok):
    event = JobEvent.from_task_end(payload, REF, ReadBack(status), on_finish)  # type: ignore[arg-type]
    assert event.ok is ok
    assert (event.error is None) is ok
    if ok and status.reason != NOT_FOUND:
        assert event.result["metrics"] == {"acc": 0.9}
    if status.state is JobState.RUNNING:
        assert "the trigger ended the wait (failed)" in event.error


# -- start: the prelude the worker and the triggerer share, on the in-memory FakeRunner --------


def request(job: DLCJob, identity: TaskIdentity = IDENTITY, **kw) -> StartRequest:
    return StartRequest(job=job, identity=identity, backend="local", conn_id=None, namespace=None,
                        local_root="/srv/jobs", base_name="train", **kw)


class Factory:
    """A runner factory with make_runner's signature; remembers how it was asked."""

    def __init__(self) -> None:
        self.runner = FakeRunner()
        self.asked: list[tuple] = []

    def __call__(self, backend, conn_id, namespace, *, extras=None, local_root=None, connection=None):
        self.asked.append((backend, conn_id, namespace, extras, local_root))
        return self.runner


BATCH = DLCJob(type="batch", image="registry.example.com/prep:1", command=["prep"], roles={"worker": 2})


def test_start_chooses_checks_builds_the_runner_and_submits(caplog):
    make = Factory()
    with caplog.at_level(logging.INFO):
        started = start(request(BATCH), logging.getLogger("t"), make=make, place="started in the triggerer")
    assert (started.backend, started.extras, started.secrets) == ("local", None, None)
    assert make.asked == [("local", "kubernetes_default", None, None, "/srv/jobs")]
    assert started.runner is make.runner and started.submission.action is Action.SUBMITTED
    assert [c for c, _ in make.runner.calls] == ["find", "submit", "claim"]
    assert "DLC batch job on the local backend (backend= is set on the task; 2 replicas: worker=2), started in " \
           "the triggerer" in caplog.text
    again = start(request(BATCH, identity=IDENTITY.__class__(**{**IDENTITY.__dict__, "try_number": 4})),
                  logging.getLogger("t"), make=make)
    assert again.submission.action is Action.ADOPTED and make.runner.owner_try(again.submission.ref) == 4


def test_start_refuses_before_anything_is_made():
    make = Factory()
    slurm_script = DLCJob(type="slurm", image="none", shell="srun hostname")
    with pytest.raises(BackendError, match="cannot run on the local backend.*backend=.*'slurm'"):
        start(request(slurm_script), logging.getLogger("t"), make=make)
    assert make.asked == [] and make.runner.calls == []


def test_start_applies_the_admins_policy_before_the_runner_exists(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"max_replicas": 1}))
    make = Factory()
    with pytest.raises(PolicyError, match="max_replicas"):
        start(request(BATCH), logging.getLogger("t"), make=make)
    assert make.asked == [] and make.runner.calls == []


def test_start_takes_the_task_state_stores_result_without_submitting():
    make = Factory()
    recorded = {"name": "train-x-1", "attempt": 1, "state": "SUCCEEDED", "result": {"state": "SUCCEEDED"}}
    started = start(request(BATCH, recorded=recorded), logging.getLogger("t"), make=make)
    assert started.submission.action is Action.RECORDED and ("submit", "train-x-1") not in make.runner.calls
