"""Retries that know the failure: the reason -> decision mapping (dlc_airflow.retrying), the
spec's fault_tolerance.oom_retry_memory, the next attempt's memory after an OOM kill
(submit_or_adopt on the FakeRunner), and DLCRetryPolicy as Airflow 3.3 calls it. Through the
real scheduler: tests/node/test_node_retry.py and tests/airflow/test_retry_scheduler.py."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest

from dlc_airflow import reasons
from dlc_airflow.errors import SpecError
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.retrying import PREEMPTION_DELAY, QUOTA_DELAY, QUOTA_EXCEEDED, Action, decide, next_attempt_job
from dlc_airflow.spec import DLCJob, parse_job
from dlc_airflow.status import JobState
from dlc_airflow.submission import submit_or_adopt
from tests.support.fake_runner import FakeRunner

LOG = logging.getLogger("test")


def job(**fault_tolerance) -> DLCJob:
    return DLCJob(type="pytorch", image="none", command=["run"], resources={"memory": "1Gi"},
                  roles={"master": 1, "worker": {"replicas": 2, "resources": {"memory": "2Gi", "cpu": "1"}}},
                  fault_tolerance=fault_tolerance)


@pytest.mark.parametrize(("reason", "memory", "action", "delay"), [
    (reasons.OOM_KILLED, "8Gi", Action.RETRY, None),
    (reasons.OOM_KILLED, None, Action.FAIL, None),
    (reasons.PREEMPTED, None, Action.RETRY, PREEMPTION_DELAY),
    (reasons.NODE_FAIL, "8Gi", Action.RETRY, PREEMPTION_DELAY),
    (QUOTA_EXCEEDED, None, Action.RETRY, QUOTA_DELAY),
    (reasons.NON_RETRYABLE_EXIT, "8Gi", Action.FAIL, None),
    (reasons.FORBIDDEN, None, Action.FAIL, None),
    (reasons.RESTART_LIMIT_EXCEEDED, None, Action.DEFAULT, None),
    (reasons.DEADLINE_EXCEEDED, None, Action.DEFAULT, None),
    (reasons.QUEUE_TIMEOUT, None, Action.DEFAULT, None),
    ("", None, Action.DEFAULT, None),
])
def test_each_reason_has_its_decision(reason, memory, action, delay):
    decision = decide(reason, memory)
    assert (decision.action, decision.delay) == (action, delay)


def test_an_oom_kill_says_what_to_raise():
    assert "raise resources.memory" in decide(reasons.OOM_KILLED, None).why
    assert "8Gi" in decide(reasons.OOM_KILLED, "8Gi").why


@pytest.mark.parametrize(("value", "words"), [
    ("lots", "fault_tolerance.oom_retry_memory: oom_retry_memory 'lots' is not a Kubernetes quantity"),
    ("2Gi", "is not more than roles.worker.resources.memory '2Gi'"),
    ("512Mi", "is not more than resources.memory '1Gi'"),
])
def test_a_bad_oom_retry_memory_is_one_line_naming_the_field(value, words):
    spec = job().to_dict()
    spec["fault_tolerance"] = {"oom_retry_memory": value}
    with pytest.raises(SpecError) as err:
        parse_job(spec, source="job of task t")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_after_an_oom_kill_every_replica_gets_the_allowed_memory():
    raised = next_attempt_job(job(oom_retry_memory="8Gi"), reasons.OOM_KILLED)
    assert raised.resources.memory == "8Gi"
    assert raised.roles["worker"].resources.memory == "8Gi" and raised.roles["worker"].resources.cpu == "1"
    assert raised.roles["master"].resources is None  # it had the job's: now 8Gi too
    assert next_attempt_job(job(), reasons.OOM_KILLED) == job()  # nothing allowed: as written
    assert next_attempt_job(job(oom_retry_memory="8Gi"), reasons.PREEMPTED) == job(oom_retry_memory="8Gi")


def test_the_attempt_after_an_oom_kill_is_submitted_with_the_allowed_memory():
    runner = FakeRunner()
    spec = job(oom_retry_memory="8Gi")
    first = submit_or_adopt(runner, spec, TaskIdentity("d", "t", "r", try_number=1), base_name="t", log=LOG)
    runner.set_state(first.ref.name, JobState.FAILED, reasons.OOM_KILLED)
    second = submit_or_adopt(runner, spec, TaskIdentity("d", "t", "r", try_number=2), base_name="t", log=LOG)
    assert second.ref.attempt == 2
    assert runner.spec(second.ref)["resources"]["memory"] == "8Gi"
    assert runner.spec(first.ref)["resources"]["memory"] == "1Gi"
    # gone (on_finish='delete'), the task state store's record tells the reason
    runner2 = FakeRunner()
    recorded = {**first.ref.to_dict(), "state": "FAILED", "result": {"reason": reasons.OOM_KILLED}}
    third = submit_or_adopt(runner2, spec, TaskIdentity("d", "t", "r", try_number=2), base_name="t", log=LOG, recorded=recorded)
    assert runner2.spec(third.ref)["resources"]["memory"] == "8Gi"


def test_the_decision_reads_the_reason_the_operator_raises():
    from dlc_airflow.operators.job import JobDidNotSucceed

    from dlc_airflow.airflow.retry import decision_for

    assert decision_for(JobDidNotSucceed("x", reasons.OOM_KILLED, "8Gi")).action is Action.RETRY
    assert decision_for(JobDidNotSucceed("x", reasons.NON_RETRYABLE_EXIT)).action is Action.FAIL
    assert decision_for(ConnectionError("api down")).action is Action.DEFAULT


def test_the_policy_as_airflow_calls_it_or_a_clear_refusal_without_retry_policies():
    from dlc_airflow.operators.job import JobDidNotSucceed

    from dlc_airflow.airflow.compat import OFFERS
    from dlc_airflow.airflow.retry import DLCRetryPolicy

    if not OFFERS.retry_policy:  # Airflow 3.1, 3.2
        with pytest.raises(TypeError, match=r"DLCRetryPolicy needs Airflow 3.3 .* remove retry_policy="):
            DLCRetryPolicy()
        return
    from airflow.sdk import RetryAction

    policy = DLCRetryPolicy()
    oom = policy.evaluate(JobDidNotSucceed("job x failed", reasons.OOM_KILLED, None), 1, 4)
    assert (oom.action, "raise resources.memory" in (oom.reason or "")) == (RetryAction.FAIL, True)
    assert policy.evaluate(JobDidNotSucceed("x", reasons.OOM_KILLED, "8Gi"), 1, 4).action is RetryAction.RETRY
    preempted = policy.evaluate(JobDidNotSucceed("x", reasons.PREEMPTED), 1, 4)
    assert (preempted.action, preempted.retry_delay) == (RetryAction.RETRY, timedelta(seconds=PREEMPTION_DELAY))
    assert policy.evaluate(JobDidNotSucceed("x", reasons.NON_RETRYABLE_EXIT), 1, 4).action is RetryAction.FAIL
    assert policy.evaluate(JobDidNotSucceed("x", reasons.RESTART_LIMIT_EXCEEDED), 1, 4).action is RetryAction.DEFAULT
    assert policy.evaluate(ConnectionError("api down"), 1, 4).action is RetryAction.DEFAULT
    assert DLCRetryPolicy.deserialize(policy.serialize()) == policy
    with pytest.raises(ValueError, match="not a DLCRetryPolicy"):
        DLCRetryPolicy.deserialize({"__type": "ExceptionRetryPolicy"})


def test_a_quota_refusal_at_submit_is_found_through_what_raised_it():
    """KubeRunner.submit raises a quota refusal as a SubmitError with reason QUOTA_EXCEEDED (not
    permanent: tests/cluster/test_runner.py makes a real ResourceQuota refuse one); the task's
    exception may wrap it."""
    from dlc_airflow.airflow.retry import decision_for
    from dlc_airflow.errors import SubmitError

    def raised(error: BaseException, cause: BaseException) -> BaseException:
        try:
            raise error from cause
        except BaseException as exc:  # noqa: BLE001
            return exc

    quota = SubmitError("submitting job x failed: exceeded quota: q", reason=QUOTA_EXCEEDED)
    assert decision_for(quota).delay == QUOTA_DELAY
    assert decision_for(raised(RuntimeError("task failed"), quota)).delay == QUOTA_DELAY
    assert decision_for(SubmitError("violates PodSecurity", permanent=True)).action is Action.DEFAULT


def test_the_operator_sets_the_policy_unless_the_task_gives_one():
    from dlc_airflow.operators import DLCJobOperator

    from dlc_airflow.airflow.compat import OFFERS
    from dlc_airflow.airflow.retry import DLCRetryPolicy

    spec = {"type": "batch", "image": "none", "command": ["run"]}
    if not OFFERS.retry_policy:  # Airflow 3.1, 3.2: none, and the trigger ends failures itself
        assert getattr(DLCJobOperator(task_id="a", job=spec), "retry_policy", None) is None
        return
    from airflow.sdk import ExceptionRetryPolicy

    assert isinstance(DLCJobOperator(task_id="a", job=spec).retry_policy, DLCRetryPolicy)
    assert DLCJobOperator(task_id="b", job=spec, retry_policy=None).retry_policy is None
    own = ExceptionRetryPolicy(rules=[])
    assert DLCJobOperator(task_id="c", job=spec, retry_policy=own).retry_policy is own


class Channel:
    """A stand-in for the triggerer's channel to its supervisor: records the Task SDK messages."""

    def __init__(self) -> None:
        self.sent: list = []

    async def asend(self, message):
        self.sent.append(message)


def test_a_deferred_failure_goes_back_to_a_worker_when_the_task_has_a_policy(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner
    from airflow.triggers.base import TaskFailedEvent, TaskSuccessEvent

    from dlc_airflow.airflow.event import XCOMS, JobEvent
    from dlc_airflow.airflow.trigger import DLCJobTrigger
    from dlc_airflow.jobref import JobRef

    channel = Channel()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)

    def event(trigger, job_event):
        trigger.task_instance = ti
        return asyncio.run(trigger._event(job_event, began=time.monotonic() - 3600))

    ref = JobRef(backend="local", place="/tmp", name="j", attempt=1)
    failed, ok = JobEvent(ref, False, {"reason": reasons.OOM_KILLED}, "oom"), JobEvent(ref, True, {"state": "S"})
    plain = DLCJobTrigger(ref=ref.to_dict())
    assert isinstance(event(plain, failed), TaskFailedEvent)
    policed = DLCJobTrigger(ref=ref.to_dict(), fail_on_worker=True)
    assert DLCJobTrigger(**policed.serialize()[1]).fail_on_worker is True
    channel.sent.clear()
    success = event(policed, ok)
    assert isinstance(success, TaskSuccessEvent) and not success.xcoms  # written as a worker writes them:
    (written,) = channel.sent
    assert (written.key, written.value, written.dag_id, written.run_id, written.task_id, written.map_index) == \
        ("return_value", {"state": "S"}, "d", "r", "t", -1)
    channel.sent.clear()
    in_dag_test = DLCJobTrigger(ref=ref.to_dict())  # no task instance: the task resumes and publishes
    assert isinstance(asyncio.run(in_dag_test._event(ok, began=time.monotonic())), TaskSuccessEvent) and channel.sent == []
    back = event(policed, failed)
    assert not isinstance(back, TaskFailedEvent) and JobEvent.from_dict(back.payload).result["reason"] == "OOMKilled"
    assert channel.sent == []  # the worker that takes the failure publishes
    policed._xcoms = {"dlc_job": {"name": "j"}}
    assert event(policed, failed).payload[XCOMS] == {"dlc_job": {"name": "j"}}


def test_a_deferred_task_goes_back_to_its_worker_no_sooner_than_the_floor(monkeypatch):
    """apache/airflow#72716: a resumed try the scheduler finds running when it drains the
    deferring worker's stale success is failed; the hand-back waits out RESUME_NOT_BEFORE."""
    import asyncio
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner

    from dlc_airflow.airflow import trigger as trigger_module
    from dlc_airflow.airflow.event import JobEvent
    from dlc_airflow.airflow.trigger import DLCJobTrigger
    from dlc_airflow.jobref import JobRef

    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", Channel(), raising=False)
    monkeypatch.setattr(trigger_module, "RESUME_NOT_BEFORE", 0.5)
    ref = JobRef(backend="local", place="/tmp", name="j", attempt=1)
    ok = JobEvent(ref, True, {"state": "SUCCEEDED"})

    def seconds_to_event(**kwargs) -> float:
        trigger = DLCJobTrigger(ref=ref.to_dict(), **kwargs)
        trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)
        began = time.monotonic()
        asyncio.run(trigger._event(ok, began))
        return time.monotonic() - began

    assert seconds_to_event(end_from_trigger=False) >= 0.5  # (outlets: the worker ends it)
    assert seconds_to_event() < 0.4  # the trigger ends the task itself: no worker to race
    assert seconds_to_event(end_from_trigger=False, start={"job": {}}) < 0.4  # never on a worker


def test_a_task_started_in_the_triggerer_publishes_its_links_once_its_job_exists(monkeypatch):
    """The job's whereabouts and links are written when the job is made (the UI shows them while
    it runs); the end then writes only the result. Under dag.test (no channel) the task
    publishes them when it resumes."""
    import asyncio
    from types import SimpleNamespace

    from airflow.sdk.execution_time import task_runner
    from airflow.triggers.base import TaskSuccessEvent

    from dlc_airflow.airflow import start as start_module
    from dlc_airflow.airflow.event import JobEvent
    from dlc_airflow.airflow.trigger import XCOMS, DLCJobTrigger
    from dlc_airflow.jobref import JobRef

    channel = Channel()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
    ref = JobRef(backend="local", place="/tmp", name="j", attempt=1)
    started = SimpleNamespace(ref=ref, runner=object(), conn_id="c", identity=SimpleNamespace(try_number=1),
                              secrets=None, began=time.time(), xcoms={"dlc_job": {"name": "j"}, "dlc_link": "u"})
    monkeypatch.setattr(start_module, "start_job", lambda *args: started)
    ok = JobEvent(ref, True, {"state": "SUCCEEDED"})

    trigger = DLCJobTrigger(start={"spec": {}})
    trigger.task_instance = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1)
    asyncio.run(trigger._begin())
    assert [(m.key, m.value) for m in channel.sent] == [("dlc_job", {"name": "j"}), ("dlc_link", "u")]
    channel.sent.clear()
    assert isinstance(asyncio.run(trigger._event(ok, time.monotonic())), TaskSuccessEvent)
    assert [m.key for m in channel.sent] == ["return_value"]

    channel.sent.clear()
    in_dag_test = DLCJobTrigger(start={"spec": {}}, end_from_trigger=False)
    asyncio.run(in_dag_test._begin())
    assert channel.sent == []
    assert asyncio.run(in_dag_test._event(ok, time.monotonic())).payload[XCOMS] == started.xcoms
