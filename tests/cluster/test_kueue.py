"""Kueue's quota system on the local control plane (k8s/cluster/kueue.yaml): the jobs of every
Kubernetes backend are admitted by Kueue v0.17.0 before anything runs, and a job that does not
fit stays queued whole, its status saying why in Kueue's words (from its Workload).

Each test namespace has LocalQueues team-a and team-b (tests/support/cluster.py). The teams'
ClusterQueues share a cohort: 24 on-demand and 8 spot GPUs between them.
"""

from __future__ import annotations

import time

import pytest

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import POD, WORKLOAD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, condition
from tests.cluster.polling import wait_all_terminal, wait_for, wait_state
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, RUN_FOR, unique_name
from tests.support.cluster import create_test_namespace, delete_namespace

# A small job per backend, multi-role where the backend makes one Workload of it.
SMALL = {
    "native": dict(type="batch", roles={"worker": 2}),
    "jobset": dict(type="pytorch", roles={"master": 1, "worker": 2}),
    "kubeflow": dict(type="pytorch", roles={"master": 1, "worker": 2}),
    "trainer": dict(type="pytorch", roles={"worker": 2}),
    "ray": dict(type="ray", roles={"head": 1, "worker": 1}),
}
# More GPUs than the whole cohort has (32): 5 pods x 8.
TOO_BIG = {
    "jobset": dict(type="pytorch", roles={"master": 1, "worker": 4}),
    "kubeflow": dict(type="pytorch", roles={"master": 1, "worker": 4}),
    "trainer": dict(type="pytorch", roles={"worker": 5}),
    "ray": dict(type="ray", roles={"head": 1, "worker": 4}),
}


@pytest.fixture(scope="module")
def queued(controllers, admin):
    ns = create_test_namespace(admin, prefix="kq")
    yield controllers.restricted(ns), admin
    delete_namespace(admin, ns)


def workloads_of(admin, namespace: str, name: str) -> list[dict]:
    """Kueue's Workloads of a job (named <kind>-<job name>-<hash>)."""
    return [w for w in admin.list(WORKLOAD, namespace)[0] if f"-{name}-" in w["metadata"]["name"]]


@pytest.mark.parametrize("backend", list(SMALL))
def test_kueue_admits_the_job_then_it_runs(queued, backend):
    kube, admin = queued
    runner = KubeRunner(kube, get_backend(backend))
    job = DLCJob(image=IMAGE, command=list(COMMAND), resources={"cpu": "1", "memory": "1Gi"},
                 scheduling={"queue": "team-a"}, **SMALL[backend])
    ref, _ = runner.submit(job, unique_name(f"adm-{backend[:4]}"), IDENTITY, 1)
    if backend == "ray":  # admitted and running; its end is a real head's word (tests/node runs Ray)
        wait_state(runner, ref, {JobState.RUNNING}, timeout=120)
        (workload,) = workloads_of(admin, kube.namespace, ref.name)
        assert condition(workload, "Admitted") and workload["status"]["admission"]["clusterQueue"] == "team-a"
        runner.delete(ref)
        return
    status = wait_all_terminal(runner, {"job": ref}, timeout=120)["job"]
    assert (status.state, status.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), status.summary()
    # Kueue marks the Workload finished once it sees the job end (a moment after us)
    (workload,) = wait_for(lambda: [w for w in workloads_of(admin, kube.namespace, ref.name)
                                    if condition(w, "Finished")], timeout=30, what="Kueue to finish the Workload")
    assert condition(workload, "Admitted") and workload["status"]["admission"]["clusterQueue"] == "team-a"


@pytest.mark.parametrize("backend", list(TOO_BIG))
def test_a_job_over_quota_stays_queued_whole(queued, backend):
    """All or nothing: no pod of a job the cohort cannot hold is created; our status says queued."""
    kube, admin = queued
    runner = KubeRunner(kube, get_backend(backend))
    job = DLCJob(image=IMAGE, command=list(COMMAND), resources={"cpu": "8", "memory": "64Gi", "gpu": 8},
                 scheduling={"queue": "team-a"}, **TOO_BIG[backend])
    ref, _ = runner.submit(job, unique_name(f"big-{backend[:4]}"), IDENTITY, 1)
    try:
        (workload,) = wait_for(lambda: [w for w in workloads_of(admin, kube.namespace, ref.name)
                                        if (w.get("status") or {}).get("conditions")], timeout=30,
                               what="Kueue's verdict on the Workload")
        reserved = next(c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert reserved["status"] == "False" and reserved["reason"] == "Pending", reserved
        assert "insufficient" in reserved["message"], reserved["message"]
        time.sleep(3)  # would anything start anyway?
        pods = [p for p in admin.list(POD, kube.namespace)[0] if p["metadata"]["name"].startswith(ref.name)]
        assert pods == [], [p["metadata"]["name"] for p in pods]
        status = runner.status(ref)
        assert (status.state, status.reason) == (JobState.QUEUED, reasons.SUSPENDED), status.summary()
        # Kueue's reason, as the task log shows it (Kueue words it anew as it retries)
        assert status.message.startswith("Kueue: couldn't assign flavors") and "insufficient" in status.message
        seen = []  # and through the shared watches the deferred wait uses
        follower = runner.follow(ref)
        follower.start(lambda s, pods: seen.append(s))
        try:
            wait_for(lambda: any(s.message.startswith("Kueue: couldn't assign flavors") for s in seen), timeout=30,
                     what="Kueue's reason through the watches")
        finally:
            follower.close()
    finally:
        runner.delete(ref)


@pytest.mark.parametrize("backend", list(SMALL))
def test_stopping_a_queued_job_keeps_it_stopped_under_kueue(queued, backend):
    """Kueue owns a queued job's suspend: stopping it deactivates its Workload too, so Kueue does
    not resume it; the job is kept, STOPPED, and nothing of it runs."""
    kube, admin = queued
    runner = KubeRunner(kube, get_backend(backend))
    job = DLCJob(image=IMAGE, command=list(COMMAND), resources={"cpu": "1", "memory": "1Gi"},
                 scheduling={"queue": "team-a"}, annotations={RUN_FOR: "600s"}, **SMALL[backend])
    ref, _ = runner.submit(job, unique_name(f"stq-{backend[:4]}"), IDENTITY, 1)
    try:
        wait_for(lambda: workloads_of(admin, kube.namespace, ref.name), timeout=30, what="Kueue's Workload")
        assert runner.stop(ref) >= 1
        assert runner.status(ref).state is JobState.STOPPED
        wait_for(lambda: all(w["spec"].get("active") is False for w in workloads_of(admin, kube.namespace, ref.name)),
                 timeout=30, what="the Workload deactivated")
        time.sleep(3)  # would Kueue resume it?
        assert runner.status(ref).state is JobState.STOPPED and runner.objects(ref)

        def running() -> list[dict]:
            return [p for p in admin.list(POD, kube.namespace)[0]
                    if p["metadata"]["name"].startswith(ref.name) and p["status"].get("phase") == "Running"]

        try:
            wait_for(lambda: not running(), timeout=60, what="nothing of the stopped job running")
        except AssertionError as exc:  # say what holds the pod (seen once: which stage, which node)
            left = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["metadata"].get("deletionTimestamp"),
                     p["metadata"].get("finalizers"), p["status"].get("conditions")) for p in running()]
            raise AssertionError(f"{exc}; still running: {left}") from None
    finally:
        runner.delete(ref)
