"""submit_or_adopt, stop_if_owner and the finish path on the local backend: real jobs,
real processes (no mocks). The same decisions on the real control plane are in
tests/cluster/test_submission_native.py.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

from dlc_airflow.errors import OwnershipError
from dlc_airflow.finish import OnFinish, finish
from dlc_airflow.local.jobs import SUPERVISOR_STARTED
from dlc_airflow.local.runner import LocalRunner
from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.progress import Progress, VerdictKind, terminal_verdict
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus
from dlc_airflow.submission import Action, stop_if_owner, submit_or_adopt

PY = sys.executable


def job(seconds: float = 0.0, code: int = 0) -> DLCJob:
    return DLCJob(type="custom", image="local", roles={"main": 1},
                  command=[PY, "-c", f"import time, sys; time.sleep({seconds}); sys.exit({code})"])


def identity(try_number: int = 1, task: str = "t") -> TaskIdentity:
    return TaskIdentity(dag_id="d", task_id=task, run_id="r", try_number=try_number)


def wait_terminal(runner: LocalRunner, ref, timeout: float = 30.0) -> JobStatus:
    deadline = time.monotonic() + timeout
    while not (status := runner.status(ref)).terminal:
        assert time.monotonic() < deadline, f"{ref.name} still {status.summary()}"
        time.sleep(0.05)
    return status


@pytest.fixture
def runner(tmp_path):
    return LocalRunner(str(tmp_path / "jobs"))


def test_first_try_submits_then_a_retry_adopts_the_live_job(runner):
    first = submit_or_adopt(runner, job(30), identity(1), base_name="train")
    assert first.action is Action.SUBMITTED and first.ref.attempt == 1
    again = submit_or_adopt(runner, job(30), identity(2), base_name="train")
    assert again.action is Action.ADOPTED and again.ref.name == first.ref.name
    assert runner.owner_try(again.ref) == 2
    assert len(runner.find(identity(3), job())) == 1  # never two jobs for one task instance
    runner.stop(first.ref)


def test_succeeded_job_is_reused_and_failed_one_leads_to_the_next_attempt(runner):
    ok = submit_or_adopt(runner, job(), identity(1, "ok"), base_name="ok")
    wait_terminal(runner, ok.ref)
    reused = submit_or_adopt(runner, job(), identity(2, "ok"), base_name="ok")
    assert reused.action is Action.REUSED and reused.ref.name == ok.ref.name
    assert reused.status.state is JobState.SUCCEEDED

    bad = submit_or_adopt(runner, job(code=3), identity(1, "bad"), base_name="bad")
    assert wait_terminal(runner, bad.ref).state is JobState.FAILED
    retry = submit_or_adopt(runner, job(code=3), identity(2, "bad"), base_name="bad")
    assert retry.action is Action.SUBMITTED and retry.ref.attempt == 2
    assert retry.ref.name == job_name("bad", identity(2, "bad"), 2)


def test_recorded_result_is_taken_when_the_job_is_gone(runner):
    recorded = {"name": "gone-1", "attempt": 4, "state": "SUCCEEDED", "result": {"state": "SUCCEEDED"}}
    taken = submit_or_adopt(runner, job(), identity(2), base_name="t", recorded=recorded)
    assert taken.action is Action.RECORDED and taken.recorded_result == {"state": "SUCCEEDED"}
    # a recorded failure: the attempt after the recorded one
    failed = dict(recorded, state="FAILED")
    nxt = submit_or_adopt(runner, job(), identity(2), base_name="t", recorded=failed)
    assert nxt.action is Action.SUBMITTED and nxt.ref.attempt == 5


def test_a_half_submitted_job_is_completed_by_the_retry(runner, monkeypatch):
    """Issue 13 4f: a try killed after making the job folder and before starting its
    supervisor leaves a job that would never run; the retry starts it."""
    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt("task process killed between the two steps")

    with monkeypatch.context() as patch:
        patch.setattr(type(runner.folders), "_start_supervisor", killed)
        with pytest.raises(KeyboardInterrupt):
            submit_or_adopt(runner, job(), identity(1), base_name="half")
    (ref,) = runner.find(identity(1), job())
    assert not (runner.folders.root / ref.name / SUPERVISOR_STARTED).exists()
    retry = submit_or_adopt(runner, job(), identity(2), base_name="half")
    assert retry.action is Action.ADOPTED and retry.ref.name == ref.name
    assert wait_terminal(runner, ref).state is JobState.SUCCEEDED


def test_a_superseded_try_does_not_stop_its_successors_job(runner):
    """Issue 13 4g: try 1's on_kill arrives after try 2 adopted the job."""
    first = submit_or_adopt(runner, job(30), identity(1), base_name="own")
    second = submit_or_adopt(runner, job(30), identity(2), base_name="own")
    assert second.action is Action.ADOPTED
    assert stop_if_owner(runner, first.ref, try_number=1) is False
    time.sleep(0.3)
    assert not runner.status(first.ref).terminal
    assert stop_if_owner(runner, second.ref, try_number=2) is True
    assert runner.status(first.ref).state is JobState.STOPPED


def test_a_claim_cannot_land_between_an_older_trys_check_and_its_stop(runner):
    """The check and the stop hold the claim's lock: try 2's claim, made while try 1 checks,
    waits until try 1 has stopped the job (try 2 then finds it stopped and submits the next
    attempt), instead of landing unseen in between."""
    first = submit_or_adopt(runner, job(60), identity(1), base_name="lock")
    real_owner, order, claimer = runner.folders.owner_try, [], []

    def check_while_try_2_claims(name):
        found = real_owner(name)
        if not claimer:
            claimer.append(threading.Thread(target=lambda: (runner.claim(first.ref, 2), order.append("claimed"))))
            claimer[0].start()
            time.sleep(0.5)  # long enough for the claim to land, were it not held back
            order.append("checked")
        return found

    real_stop = runner.folders.stop

    def stop(name):
        stopped = real_stop(name)
        order.append("stopped")
        return stopped

    runner.folders.owner_try, runner.folders.stop = check_while_try_2_claims, stop
    assert stop_if_owner(runner, first.ref, try_number=1) is True
    claimer[0].join(30)
    assert order == ["checked", "stopped", "claimed"]
    assert runner.status(first.ref).state is JobState.STOPPED
    runner.folders.owner_try, runner.folders.stop = real_owner, real_stop
    second = submit_or_adopt(runner, job(0), identity(3), base_name="lock")
    assert (second.action, second.ref.attempt) == (Action.SUBMITTED, 2)


def test_another_tasks_job_of_the_same_name_is_refused(runner):
    name = job_name("x", identity(1), 1)
    runner.submit(job(), name, identity(1, task="other"), 1)
    with pytest.raises(OwnershipError, match="belongs to task key"):
        runner.submit(job(), name, identity(1), 1)


def test_local_refs_carry_a_uid(runner):
    sub = submit_or_adopt(runner, job(), identity(1), base_name="uid")
    assert len(sub.ref.uid) == 36 and runner.lookup(sub.ref.name).uid == sub.ref.uid
    assert runner.lookup("no-such-job") is None


# -- the finish path ---------------------------------------------------------------


def test_finish_records_deletes_and_reports(runner, caplog):
    sub = submit_or_adopt(runner, job(), identity(1), base_name="fin")
    status = wait_terminal(runner, sub.ref)
    recorded = []
    import logging

    outcome = finish(runner, sub.ref, terminal_verdict(sub.ref.name, status), None,
                     on_finish=OnFinish.DELETE, log=logging.getLogger("t"), record=recorded.append, owner_try=1)
    assert outcome.ok and outcome.error is None and outcome.result["state"] == "SUCCEEDED"
    assert outcome.result["uid"] == sub.ref.uid
    assert recorded == [{**sub.ref.to_dict(), "state": "SUCCEEDED", "result": outcome.result}]
    assert runner.lookup(sub.ref.name) is None  # deleted


def test_finish_stops_a_job_that_ran_out_of_time(runner):
    import logging

    sub = submit_or_adopt(runner, job(60), identity(1), base_name="slow")
    progress = Progress(sub.ref.name, 0.0, timeout=1.0)
    progress.update(runner.status(sub.ref), 0.0)
    late = progress.verdict(5.0)
    assert late.kind is VerdictKind.TIMEOUT
    outcome = finish(runner, sub.ref, late, None, on_finish=OnFinish.KEEP, log=logging.getLogger("t"), owner_try=1)
    assert not outcome.ok and "did not finish within timeout" in outcome.error
    assert runner.status(sub.ref).state is JobState.STOPPED


def test_a_timed_out_try_does_not_stop_the_job_a_newer_try_adopted(runner, caplog):
    """Try 1's wait times out after try 2 adopted the job (a scheduler reset the task while
    try 1 still ran): try 1 fails, and try 2's job runs on."""
    import logging

    sub = submit_or_adopt(runner, job(60), identity(1), base_name="slow")
    adopted = submit_or_adopt(runner, job(60), identity(2), base_name="slow")
    assert adopted.ref.name == sub.ref.name
    progress = Progress(sub.ref.name, 0.0, timeout=1.0)
    progress.update(runner.status(sub.ref), 0.0)
    with caplog.at_level(logging.INFO):
        outcome = finish(runner, sub.ref, progress.verdict(5.0), None, on_finish=OnFinish.KEEP,
                         log=logging.getLogger("t"), owner_try=1)
    assert not outcome.ok and "try 2 adopted it" in caplog.text
    assert not runner.status(sub.ref).terminal
    runner.stop(sub.ref)
