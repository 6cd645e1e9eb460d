"""submit_or_adopt and stop_if_owner on the in-memory FakeRunner (tests/support/fake_runner.py,
which the conformance suite holds to the real runners' behaviour): every decision of the rule,
without a backend. The same decisions with real jobs: tests/local/test_submission_local.py and
tests/cluster/test_submission_native.py."""

from __future__ import annotations

import logging

import pytest

from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from dlc_airflow.submission import Action, stop_if_owner, submit_or_adopt
from tests.support.fake_runner import FakeRunner

LOG = logging.getLogger("test")
JOB = DLCJob(type="batch", image="none", command=["run"], roles={"worker": 2})


def identity(try_number: int = 1, task: str = "train") -> TaskIdentity:
    return TaskIdentity(dag_id="d", task_id=task, run_id="r", try_number=try_number)


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


def test_nothing_yet_submits_attempt_1_and_claims_it(runner):
    sub = submit_or_adopt(runner, JOB, identity(), base_name="train", log=LOG)
    assert (sub.action, sub.ref.attempt) == (Action.SUBMITTED, 1)
    assert sub.status.state is JobState.RUNNING
    assert runner.owner_try(sub.ref) == 1
    assert [c for c, _ in runner.calls] == ["find", "submit", "claim"]


def test_a_live_job_is_adopted_and_claimed_by_the_new_try(runner):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    again = submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert (again.action, again.ref.name, again.ref.uid) == (Action.ADOPTED, first.ref.name, first.ref.uid)
    assert runner.owner_try(first.ref) == 2
    assert len(runner.by_name) == 1  # never two jobs for one task instance


def test_a_succeeded_job_is_reused_unless_told_not_to(runner):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    runner.set_state(first.ref.name, JobState.SUCCEEDED)
    reused = submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert (reused.action, reused.ref.name) == (Action.REUSED, first.ref.name)
    assert [c for c, _ in runner.calls].count("submit") == 1
    anew = submit_or_adopt(runner, JOB, identity(3), base_name="train", reuse_succeeded=False, log=LOG)
    assert (anew.action, anew.ref.attempt) == (Action.SUBMITTED, 2) and anew.ref.name != first.ref.name


@pytest.mark.parametrize("ended", [JobState.FAILED, JobState.STOPPED])
def test_a_failed_or_stopped_job_leads_to_the_next_attempt(runner, ended):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    runner.set_state(first.ref.name, ended)
    second = submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert (second.action, second.ref.attempt) == (Action.SUBMITTED, 2)
    assert second.ref.name != first.ref.name and runner.owner_try(second.ref) == 2


def test_the_task_state_store_speaks_when_the_job_is_gone(runner):
    recorded = {"name": "train-x-1", "attempt": 1, "state": "SUCCEEDED", "result": {"state": "SUCCEEDED"}}
    taken = submit_or_adopt(runner, JOB, identity(2), base_name="train", recorded=recorded, log=LOG)
    assert (taken.action, taken.ref, taken.recorded_result) == (Action.RECORDED, None, {"state": "SUCCEEDED"})
    assert not runner.by_name
    after_failure = {"name": "train-x-3", "attempt": 3, "state": "FAILED"}
    next_one = submit_or_adopt(runner, JOB, identity(4), base_name="train", recorded=after_failure, log=LOG)
    assert (next_one.action, next_one.ref.attempt) == (Action.SUBMITTED, 4)


def test_a_refused_submit_propagates_and_another_tasks_job_is_not_adopted(runner):
    runner.refuse(SubmitError("quota exceeded", permanent=True))
    with pytest.raises(SubmitError, match="quota exceeded") as refused:
        submit_or_adopt(runner, JOB, identity(), base_name="train", log=LOG)
    assert refused.value.permanent and not runner.by_name
    mine = submit_or_adopt(runner, JOB, identity(task="a"), base_name="same", log=LOG)
    with pytest.raises(OwnershipError):
        runner.submit(JOB, mine.ref.name, identity(task="b"), 1)


def test_a_claim_that_fails_is_said_and_the_job_still_runs(runner, caplog):
    def claim_fails(ref, try_number):
        raise RuntimeError("patch refused")

    runner.claim = claim_fails  # the backend refuses the mark (e.g. RBAC): the task goes on
    with caplog.at_level(logging.WARNING):
        sub = submit_or_adopt(runner, JOB, identity(), base_name="train", log=LOG)
    assert sub.action is Action.SUBMITTED and "could not mark job" in caplog.text


def test_an_older_try_does_not_stop_the_job_a_newer_try_adopted(runner):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert stop_if_owner(runner, first.ref, 1, LOG) is False
    assert runner.status(first.ref).state is JobState.RUNNING
    assert stop_if_owner(runner, first.ref, 2, LOG) is True
    assert runner.status(first.ref).state is JobState.STOPPED


@pytest.mark.parametrize("end", ["stop", "delete"])
def test_a_job_ended_by_an_older_try_while_this_try_adopts_it_is_no_verdict(runner, end):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    real_claim = runner.claim

    def ended_before_claim(ref, try_number):  # try 1's on_kill lands between find and claim
        getattr(runner, end)(first.ref)
        if ref.name in runner.by_name:
            real_claim(ref, try_number)

    runner.claim = ended_before_claim
    second = submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert (second.action, second.ref.attempt) == (Action.SUBMITTED, 2)
    assert not second.status.terminal and second.ref.name != first.ref.name


def test_a_job_that_succeeds_while_adopted_is_reused(runner):
    first = submit_or_adopt(runner, JOB, identity(1), base_name="train", log=LOG)
    real_claim = runner.claim

    def succeeds_meanwhile(ref, try_number):
        runner.set_state(first.ref.name, JobState.SUCCEEDED)
        real_claim(ref, try_number)

    runner.claim = succeeds_meanwhile
    taken = submit_or_adopt(runner, JOB, identity(2), base_name="train", log=LOG)
    assert (taken.action, taken.ref.name) == (Action.REUSED, first.ref.name)
