"""finish_plan (pure) and finish on the in-memory FakeRunner: the steps after a verdict and the
task's outcome, the same for every backend. With real jobs: tests/local/test_submission_local.py."""

from __future__ import annotations

import logging

import pytest

from dlc_airflow.finish import OnFinish, finish, finish_plan
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.progress import Verdict, VerdictKind, terminal_verdict
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus
from dlc_airflow.submission import submit_or_adopt
from tests.support.fake_runner import FakeRunner

LOG = logging.getLogger("test")
JOB = DLCJob(type="pytorch", image="none", command=["train"], roles={"master": 1, "worker": 2})


def verdict(kind: VerdictKind, state: str) -> Verdict:
    return Verdict(kind, JobStatus(state=JobState(state)), f"job x {state.lower()}")


@pytest.mark.parametrize("kind,state,owner,on_finish,expected", [
    (VerdictKind.FINISHED, "SUCCEEDED", True, OnFinish.KEEP, (False, True, False, True)),
    (VerdictKind.FINISHED, "SUCCEEDED", True, OnFinish.DELETE, (False, True, True, True)),
    (VerdictKind.FINISHED, "FAILED", True, OnFinish.DELETE, (False, True, True, False)),
    # out of time: stopped (kept, as on every backend), and deleted when on_finish says so
    (VerdictKind.TIMEOUT, "RUNNING", True, OnFinish.DELETE, (True, False, True, False)),
    (VerdictKind.TIMEOUT, "RUNNING", True, OnFinish.KEEP, (True, False, False, False)),
    (VerdictKind.QUEUE_TIMEOUT, "QUEUED", True, OnFinish.KEEP, (True, False, False, False)),
    # a sensor only watches: it never stops, settles or deletes
    (VerdictKind.TIMEOUT, "RUNNING", False, OnFinish.KEEP, (False, False, False, False)),
    (VerdictKind.FINISHED, "SUCCEEDED", False, OnFinish.DELETE, (False, False, False, True)),
])
def test_finish_plan(kind, state, owner, on_finish, expected):
    plan = finish_plan(verdict(kind, state), on_finish, owner)
    assert (plan.stop, plan.settle, plan.delete, plan.ok) == expected


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


def submitted(runner: FakeRunner, try_number: int = 1):
    identity = TaskIdentity(dag_id="d", task_id="train", run_id="r", try_number=try_number)
    return submit_or_adopt(runner, JOB, identity, base_name="train", log=LOG).ref


def test_a_succeeded_job_is_settled_recorded_and_its_result_has_what_the_coordinator_reported(runner):
    ref = submitted(runner)
    runner.report(ref.name, "worker-1", {"loss": 9.0, "seen": 1})
    runner.report(ref.name, "master-0", {"loss": 0.1})
    runner.by_name[ref.name].leftovers = [f"{ref.name}-ps"]
    runner.set_state(ref.name, JobState.SUCCEEDED)
    recorded: list[dict] = []
    outcome = finish(runner, ref, terminal_verdict(ref.name, runner.status(ref)), None, on_finish=OnFinish.KEEP,
                     log=LOG, owner_try=1, record=recorded.append)
    assert outcome.ok and outcome.error is None
    assert outcome.result["metrics"] == {"loss": 0.1, "seen": 1}  # the coordinator's values win
    assert (outcome.result["job_name"], outcome.result["namespace"]) == (ref.name, ref.place)
    assert recorded == [{**ref.to_dict(), "state": "SUCCEEDED", "result": outcome.result}]
    assert ("settle", ref.name) in runner.calls and ("delete", ref.name) not in runner.calls


@pytest.mark.parametrize("on_finish, kept", [(OnFinish.KEEP, True), (OnFinish.DELETE, False)])
def test_a_job_out_of_time_is_stopped_and_on_finish_decides_whether_it_stays(runner, on_finish, kept):
    ref = submitted(runner)
    late = Verdict(VerdictKind.TIMEOUT, runner.status(ref), f"job {ref.name} did not finish within timeout")
    outcome = finish(runner, ref, late, None, on_finish=on_finish, log=LOG, owner_try=1)
    assert not outcome.ok and "did not finish within timeout" in outcome.error
    assert ("stop", ref.name) in runner.calls and ("settle", ref.name) not in runner.calls
    assert (runner.lookup(ref.name) is not None) is kept
    if kept:
        assert runner.status(ref).state is JobState.STOPPED


def test_a_superseded_try_out_of_time_leaves_the_newer_trys_job_running(runner, caplog):
    ref = submitted(runner, try_number=1)
    submitted(runner, try_number=2)  # a scheduler reset the task: try 2 adopted the job
    late = Verdict(VerdictKind.TIMEOUT, runner.status(ref), "out of time")
    with caplog.at_level(logging.INFO):
        outcome = finish(runner, ref, late, None, on_finish=OnFinish.DELETE, log=LOG, owner_try=1)
    assert not outcome.ok and "try 2 adopted it" in caplog.text
    assert runner.status(ref).state is JobState.RUNNING


def test_a_sensor_only_watches(runner):
    ref = submitted(runner)
    runner.set_state(ref.name, JobState.FAILED, "PodFailurePolicy", "worker-1 exited with code 3")
    outcome = finish(runner, ref, terminal_verdict(ref.name, runner.status(ref)), None, on_finish=OnFinish.DELETE,
                     log=LOG, owner_try=None)
    assert not outcome.ok and "PodFailurePolicy" in outcome.error
    assert not {c for c, _ in runner.calls} & {"stop", "settle", "delete"}


def test_a_runner_that_cannot_settle_is_not_asked_to(runner):
    """Settling is an optional capability: a backend without leftovers has no settle at all."""
    class WithoutSettle:
        def __init__(self, inner: FakeRunner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            if name == "settle":
                raise AttributeError(name)
            return getattr(self.inner, name)

    ref = submitted(runner)
    runner.set_state(ref.name, JobState.SUCCEEDED)
    outcome = finish(WithoutSettle(runner), ref, terminal_verdict(ref.name, runner.status(ref)), None,  # type: ignore[arg-type]
                     on_finish=OnFinish.KEEP, log=LOG, owner_try=1)
    assert outcome.ok and ("settle", ref.name) not in runner.calls
