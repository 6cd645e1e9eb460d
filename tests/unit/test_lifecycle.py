"""The task lifecycle's pure parts: what a task publishes about its job (the same on the
worker and in the triggerer) and the one outcome rule (the end of a wait, and a wait read
back after the trigger ended the task)."""

from __future__ import annotations

import pytest

from dlc_airflow.airflow import links
from dlc_airflow.airflow.event import JobEvent
from dlc_airflow.airflow.keys import XCOM_REF
from dlc_airflow.airflow.lifecycle import identity_of, publication
from dlc_airflow.finish import OnFinish, outcome_of, succeeded
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.kinds import JOBSET, kinds_detail
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.progress import Verdict, VerdictKind
from dlc_airflow.reasons import NOT_FOUND
from dlc_airflow.status import JobState, JobStatus

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
