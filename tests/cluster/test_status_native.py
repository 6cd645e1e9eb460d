"""Native JobStatus on objects the real Job controller produced (kwok runs the pods).

Failures come from kwok's chaos stages, placed by the job's own labels and annotations (they go
onto the pod templates): a container that exits with a given code, a preempted pod. Every
scenario runs concurrently in one namespace; each test waits for its own job through
KubeRunner.status, the waiting side's path (Job objects and their pods).
Success on the real controller is covered by test_backends_accepted.py (every job type).
"""

from __future__ import annotations

import pytest

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import JOB, POD, ref_kinds
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import LABEL_JOB
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.cluster.polling import wait_for, wait_state
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, unique_name
from tests.support.cluster import create_test_namespace, delete_namespace

CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"
PREEMPT = "pod-preempt.stage.kwok.x-k8s.io"
DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
TERMINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}


def failing(exit_code: int) -> dict:
    """Labels and annotations that make kwok fail the main container with `exit_code`."""
    return {"labels": {CHAOS: "true"}, "annotations": {f"{CHAOS}/exit-code": str(exit_code), f"{CHAOS}/delay": "0s"}}


SCENARIOS = {
    # a permanent error: exit code 3 is not retryable, so the FailJob rule ends the job at once
    "fail-job-rule": dict(type="batch", roles={"worker": 2},
                          fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]}, **failing(3)),
    # a retryable error every time: one restart, then the replica (and the job) fails
    "backoff": dict(type="batch", roles={"worker": 1}, fault_tolerance={"max_restarts": 1}, **failing(1)),
    "deadline": {"type": "pytorch", "roles": {"master": 1, "worker": 1}, "max_running_time": 3,
                 "annotations": {DELAY: "600s"}},
    "unschedulable": {"type": "batch", "roles": {"worker": 1}, "resources": {"gpu": 64}},
    "suspended": {"type": "batch", "roles": {"worker": 2}, "scheduling": {"queue": "team-ml"}},
}


@pytest.fixture(scope="module")
def scenarios(cluster, admin):
    ns = create_test_namespace(admin, prefix="st")
    kube = cluster.restricted(ns)
    runner = KubeRunner(kube, get_backend("native"))
    try:
        refs = {}
        for key, spec in SCENARIOS.items():
            job = DLCJob(image=IMAGE, command=list(COMMAND), **spec)
            refs[key], _ = wait_for(lambda job=job, key=key: _submit(runner, job, key), timeout=15,
                                    what="RBAC for the new namespace")
        yield runner, refs
    finally:
        delete_namespace(admin, ns)


def _submit(runner, job, key):
    from dlc_airflow.errors import SubmitError

    try:
        return runner.submit(job, unique_name(key), IDENTITY, 1)
    except SubmitError as exc:  # the RoleBinding of a brand-new namespace takes a moment
        if "forbidden" in str(exc).lower():
            return None
        raise


def test_fail_job_rule_on_a_non_retryable_exit_code(scenarios):
    runner, refs = scenarios
    s = wait_state(runner, refs["fail-job-rule"], TERMINAL, timeout=60)
    assert (s.state, s.reason) == (JobState.FAILED, reasons.NON_RETRYABLE_EXIT), s.summary()
    # the Job controller's message, then the failing container from the pods
    assert s.message.startswith("worker: Container main for pod ") and "failed with exit code 3" in s.message
    assert "container main exited with code 3" in s.message
    assert s.restarts == 0 and s.finished is not None
    # The controller may set the condition before it has counted the failed pods.
    wait_for(lambda: runner.status(refs["fail-job-rule"]).roles["worker"].failed >= 1, timeout=30,
             what="the failed pod counted")


def test_backoff_exhausted_counts_the_restart(scenarios):
    runner, refs = scenarios
    s = wait_state(runner, refs["backoff"], TERMINAL, timeout=90)  # the controller backs off ~10s
    assert s.state is JobState.FAILED, s.summary()
    assert s.reason == reasons.RESTART_LIMIT_EXCEEDED  # the Job controller's wording in the message
    assert s.restarts == 1
    assert "container main exited with code 1" in s.message
    # The controller may set the condition before it has counted the failed pods.
    wait_for(lambda: runner.status(refs["backoff"]).roles["worker"].failed == 2, timeout=30,
             what="both failed pods counted")
    pods = runner.pods(refs["backoff"])
    assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)


def test_deadline_exceeded_by_max_running_time(scenarios):
    runner, refs = scenarios
    s = wait_state(runner, refs["deadline"], TERMINAL, timeout=60)
    assert (s.state, s.reason) == (JobState.FAILED, reasons.DEADLINE_EXCEEDED), s.summary()
    assert "active longer than specified deadline" in s.message and s.restarts == 0
    assert (s.finished - s.started).total_seconds() >= 3


def test_unschedulable_is_queued_with_the_schedulers_message_then_stopped_then_deleted(scenarios):
    runner, refs = scenarios
    ref = refs["unschedulable"]
    s = wait_state(runner, ref, {JobState.QUEUED}, timeout=60)
    assert s.reason == "Unschedulable" and not s.terminal
    assert "nodes are available" in s.message and "Insufficient nvidia.com/gpu" in s.message
    assert runner.stop(ref) == 1  # the Job: a past deadline, and the stop's mark
    s = wait_state(runner, ref, {JobState.STOPPED}, timeout=30)
    assert s.reason == "Stopped"  # its objects are kept, as on every backend
    assert runner.client.list(JOB, ref.place, labels={LABEL_JOB: ref.name})[0]
    wait_for(lambda: not runner.pods(ref), timeout=60, what="the stopped job's pods gone")
    assert runner.stop(ref) == 0  # it has ended: nothing to stop
    runner.delete(ref)
    wait_for(lambda: all(not runner.client.list(k, ref.place, labels={LABEL_JOB: ref.name})[0]
                         for k in ref_kinds(ref)), timeout=30, what="every object of the deleted job gone")


def test_suspended_for_kueue_is_queued(scenarios):
    runner, refs = scenarios
    s = wait_state(runner, refs["suspended"], {JobState.QUEUED}, timeout=30)
    assert s.reason == "Suspended" and s.message
    assert runner.pods(refs["suspended"]) == []  # nothing starts outside the queue's quota
    # the namespace has no LocalQueue team-ml: Kueue says so, and so does the status
    wait_for(lambda: runner.status(refs["suspended"]).message == "Kueue: LocalQueue team-ml doesn't exist",
             timeout=30, what="Kueue's verdict in the status")


def test_preempted_pod_is_replaced_without_a_restart(kube, admin):
    runner = KubeRunner(kube, get_backend("native"))
    job = DLCJob(image=IMAGE, command=list(COMMAND), type="batch", roles={"worker": 1},
                 fault_tolerance={"max_restarts": 0}, annotations={DELAY: "4s"})
    ref, _ = runner.submit(job, unique_name("preempt"), IDENTITY, 1)
    first = wait_for(lambda: next((p for p in runner.pods(ref) if p["status"].get("phase") == "Running"), None),
                     timeout=30, interval=0.1, what="a running pod")
    # The scheduler (or a spot reclaim) preempts it: kwok fails it with DisruptionTarget.
    admin.patch(POD, first["metadata"]["name"], {"metadata": {"labels": {PREEMPT: "true"},
                                                              "annotations": {f"{PREEMPT}/delay": "0s"}}},
                namespace=kube.namespace)
    s = wait_state(runner, ref, TERMINAL, timeout=60)
    assert s.state is JobState.SUCCEEDED, s.summary()
    assert s.restarts == 0  # max_restarts 0 and still succeeded: preemption is not a failure
    pods = kube.list(POD, labels={LABEL_JOB: ref.name})[0]
    preempted = [p for p in pods if any(c["type"] == "DisruptionTarget" and c["status"] == "True"
                                        for c in p["status"].get("conditions", []))]
    assert [p["metadata"]["name"] for p in preempted] == [first["metadata"]["name"]], "the pod was not preempted"
    assert [p["status"]["phase"] for p in pods if p not in preempted] == ["Succeeded"]
