"""Idempotent submission against the real API server: adopt, complete a half-made job,
refuse another task's objects, and roll back a refused submission."""

from __future__ import annotations

import uuid

import pytest

from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import CONFIG_MAP, JOB, POD, SERVICE, kind_of
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import MANAGED_BY, TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, condition


def mpi_job() -> DLCJob:
    # four objects: launcher Job, Service, hostfile ConfigMap, worker Job
    return DLCJob(type="mpi", image="registry.local/mpi:1", command=["mpirun", "app"],
                  roles={"launcher": 1, "worker": 2},
                  annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"})


def identity() -> TaskIdentity:
    return TaskIdentity("dag", "task", f"run-{uuid.uuid4().hex[:6]}")


def managed(kube, kind):
    return kube.list(kind, labels={MANAGED_BY: "dlc-airflow"})[0]


def test_second_submit_adopts(kube):
    runner = KubeRunner(kube, get_backend("native"))
    ident = identity()
    name = job_name("mpi", ident, 1)
    first, created = runner.submit(mpi_job(), name, ident, 1)
    again, created_again = runner.submit(mpi_job(), name, ident, 1)
    assert created and not created_again
    assert first.uid and again.uid == first.uid
    assert len(managed(kube, JOB)) == 2 and len(managed(kube, SERVICE)) == 1
    assert [r.name for r in runner.find(ident, mpi_job())] == [name]


def test_half_made_job_is_completed_by_the_next_submit(kube, admin):
    """A worker that died after creating the first object: the retry adopts it and creates the rest
    (the job's SSH key Secret too, read back as the admin: the runner's Role may not read Secrets)."""
    runner = KubeRunner(kube, get_backend("native"))
    ident = identity()
    name = job_name("mpi", ident, 1)
    objects = get_backend("native").render(mpi_job(), name, ident, 1)
    primary = kube.create(objects[0])
    ref, created = runner.submit(mpi_job(), name, ident, 1)
    assert created  # the missing objects were created
    assert ref.uid == primary["metadata"]["uid"]
    for obj in objects[1:]:
        reader = admin if obj["kind"] == "Secret" else kube
        made = reader.get(kind_of(obj), obj["metadata"]["name"], kube.namespace)
        assert made["metadata"]["ownerReferences"][0]["uid"] == primary["metadata"]["uid"]


def test_objects_of_another_task_are_never_adopted(kube):
    runner = KubeRunner(kube, get_backend("native"))
    mine, theirs = identity(), identity()
    name = job_name("mpi", mine, 1)
    runner.submit(mpi_job(), name, theirs, 1)  # same name, another task instance
    before = {o["metadata"]["uid"] for o in managed(kube, JOB)}
    with pytest.raises(OwnershipError, match="belongs to another task"):
        runner.submit(mpi_job(), name, mine, 1)
    assert {o["metadata"]["uid"] for o in managed(kube, JOB)} == before


def test_refused_submission_leaves_nothing_behind(kube):
    class BrokenLast:
        """The native backend, but its last object is one the API server refuses."""

        def __init__(self):
            self.inner = get_backend("native")
            self.name = "native"

        def render(self, *args, **kwargs):
            objects = self.inner.render(*args, **kwargs)
            objects[-1]["spec"]["parallelism"] = -1  # invalid: the server says which field
            return objects

        def __getattr__(self, item):
            return getattr(self.inner, item)

    runner = KubeRunner(kube, BrokenLast())
    ident = identity()
    with pytest.raises(SubmitError, match="parallelism"):
        runner.submit(mpi_job(), job_name("mpi", ident, 1), ident, 1)
    assert managed(kube, JOB) == [] and managed(kube, SERVICE) == [] and managed(kube, CONFIG_MAP) == []


def test_stop_keeps_every_object_and_delete_removes_them(kube):
    runner = KubeRunner(kube, get_backend("native"))
    ident = identity()
    ref, _ = runner.submit(mpi_job(), job_name("mpi", ident, 1), ident, 1)
    def names():
        return sorted(o["metadata"]["name"] for k in (JOB, SERVICE, CONFIG_MAP) for o in managed(kube, k))

    kept = names()
    assert runner.stop(ref) == 2  # the launcher's and the workers' Jobs
    assert names() == kept
    assert runner.status(ref).state is JobState.STOPPED
    assert runner.stop(ref) == 0  # idempotent: it has ended
    runner.delete(ref)
    assert managed(kube, JOB) == [] and managed(kube, SERVICE) == [] and managed(kube, CONFIG_MAP) == []
    runner.delete(ref)  # idempotent


def test_settle_stops_the_roles_left_running_after_one_role_failed(kube, admin):
    """Native: one Job per role. The worker Job fails while the master's pod runs on; once
    the job as a whole has failed, settle stops the master Job. Every object stays, though
    the master Job is the primary that owns the rest: deleting it would take the failed
    worker Job with it."""
    import time

    from dlc_airflow.status import JobState

    runner = KubeRunner(kube, get_backend("native"))
    ident = identity()
    job = DLCJob(type="pytorch", image="registry.local/train:1", command=["train"],
                 roles={"master": 1, "worker": 2},
                 annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"})
    ref, _ = runner.submit(job, job_name("ddp", ident, 1), ident, 1)
    chaos = "pod-container-running-failed.stage.kwok.x-k8s.io"

    def running_worker():
        pods = kube.list(POD, labels={"dlc-airflow/role": "worker"})[0]
        return next((p for p in pods if p["status"].get("phase") == "Running"), None)

    deadline = time.monotonic() + 60
    while (pod := running_worker()) is None:
        assert time.monotonic() < deadline, f"no worker pod ran: {pod_states(kube)}"
        time.sleep(0.3)
    admin.patch(POD, pod["metadata"]["name"], {"metadata": {
        "labels": {chaos: "true"}, "annotations": {f"{chaos}/delay": "0s"}}}, namespace=kube.namespace)
    while runner.status(ref).state is not JobState.FAILED:
        assert time.monotonic() < deadline + 60, runner.status(ref).summary()
        time.sleep(0.3)
    failed = runner.status(ref)
    assert runner.settle(ref) == [f"{ref.name}-master"]
    assert runner.settle(ref) == []  # already being stopped

    def stopped_master() -> dict | None:
        """The master Job, once the Job controller has failed it and its pod runs no more."""
        master = kube.get(JOB, f"{ref.name}-master")
        pods = kube.list(POD, labels={"dlc-airflow/role": "master"})[0]
        if master and condition(master, "Failed") and all(p["status"].get("phase") != "Running" for p in pods):
            return master
        return None

    deadline = time.monotonic() + 60
    while not (master := stopped_master()):
        assert time.monotonic() < deadline, f"the master kept running: {pod_states(kube)}"
        time.sleep(0.3)
    assert condition(master, "Failed")["reason"] == "DeadlineExceeded"
    assert kube.get(JOB, f"{ref.name}-worker") is not None  # the failed one stays for inspection
    assert kube.get(SERVICE, ref.name) is not None
    after = runner.status(ref)  # still the worker's failure, not the stop
    assert (after.state, after.reason, after.message, after.restarts) == (
        failed.state, failed.reason, failed.message, failed.restarts)


def pod_states(kube) -> list[tuple]:
    return [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
             [c.get("reason") or c["type"] for c in p["status"].get("conditions", [])])
            for p in kube.list(POD)[0]]


def test_a_resource_quota_refusal_is_worth_a_later_try(kube, admin):
    """A namespace's ResourceQuota refuses the job's Job at create: nothing is left behind, and
    the error says a later try can help (not permanent, reason QuotaExceeded), which the retry
    policy turns into a retry after QUOTA_DELAY (README "Retries that know the failure")."""
    from dlc_airflow.airflow.retry import decision_for
    from dlc_airflow.k8s.kinds import ResourceKind
    from dlc_airflow.reasons import QUOTA_EXCEEDED
    from dlc_airflow.retrying import QUOTA_DELAY
    from tests.cluster.polling import wait_for

    quota = ResourceKind("v1", "ResourceQuota", "resourcequotas")
    admin.request("POST", quota.path(kube.namespace), body={
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-jobs"},
        "spec": {"hard": {"count/jobs.batch": "0"}}})
    try:
        # the quota controller fills in the quota's status before admission counts against it
        wait_for(lambda: (admin.get(quota, "no-jobs", kube.namespace).get("status") or {}).get("hard"),
                 timeout=30, what="the quota controller to take in the ResourceQuota")
        runner = KubeRunner(kube, get_backend("native"))
        ident = identity()
        with pytest.raises(SubmitError, match="exceeded quota") as refused:
            runner.submit(DLCJob(type="batch", image="img", command=["x"]), job_name("quota", ident, 1), ident, 1)
        assert (refused.value.permanent, refused.value.reason) == (False, QUOTA_EXCEEDED)
        assert decision_for(refused.value).delay == QUOTA_DELAY
        assert managed(kube, JOB) == [] and managed(kube, SERVICE) == []
    finally:
        admin.delete(quota, "no-jobs", kube.namespace)
