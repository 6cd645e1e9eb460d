"""Kueue's topology-aware scheduling (TAS) under real Kueue v0.17.0: scheduling.topology puts a
job's pods within one rack of the tas-* nodes (k8s/cluster/nodes.yaml: two racks of two 8-cpu
nodes; k8s/cluster/kueue.yaml: Topology racks, flavor tas, ClusterQueue team-tas), or keeps the
whole job queued with Kueue's reason when no rack can hold it.
"""

from __future__ import annotations

import time

import pytest

from dlc_airflow import naming, reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import NODE, POD, WORKLOAD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.cluster.polling import wait_for
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, RUN_FOR, unique_name
from tests.support.cluster import (
    create_test_namespace,
    delete_namespace,
    ensure_local_queue,
    wait_local_queues_active,
)

RACK = "cloud.provider.com/topology-rack"
# 3 pods of 3 cpu: more than a node holds (8 cpu: 2 pods), less than a rack (4 pods)
FITS_A_RACK = {
    "native": dict(type="batch", roles={"worker": 3}),
    "jobset": dict(type="pytorch", roles={"master": 1, "worker": 2}),
    "kubeflow": dict(type="pytorch", roles={"master": 1, "worker": 2}),
    "trainer": dict(type="pytorch", roles={"worker": 3}),
    "ray": dict(type="ray", roles={"head": 1, "worker": 2}),
}


@pytest.fixture(scope="module")
def tas_queue(controllers, admin):
    ns = create_test_namespace(admin, prefix="tas")
    ensure_local_queue(admin, ns, "team-tas")
    wait_local_queues_active(admin, ns, ("team-tas",))
    yield controllers.restricted(ns), admin
    delete_namespace(admin, ns)


def job_pods(admin, namespace: str, name: str) -> list[dict]:
    """The pods of a job's roles (not KubeRay's submitter, which no topology binds)."""
    return [p for p in admin.list(POD, namespace)[0] if p["metadata"]["name"].startswith(name)
            and naming.LABEL_ROLE in p["metadata"].get("labels", {})]


@pytest.mark.parametrize("backend", list(FITS_A_RACK))
def test_required_rack_puts_every_pod_in_one_rack(tas_queue, backend):
    kube, admin = tas_queue
    runner = KubeRunner(kube, get_backend(backend))
    job = DLCJob(image=IMAGE, command=list(COMMAND), resources={"cpu": "3", "memory": "1Gi"},
                 scheduling={"queue": "team-tas", "topology": {"required": RACK}},
                 annotations={RUN_FOR: "600s"}, **FITS_A_RACK[backend])
    ref, _ = runner.submit(job, unique_name(f"tas-{backend[:4]}"), IDENTITY, 1)
    try:
        placed = wait_for(lambda: [p for p in job_pods(admin, kube.namespace, ref.name) if p["spec"].get("nodeName")]
                          if len([p for p in job_pods(admin, kube.namespace, ref.name)
                                  if p["spec"].get("nodeName")]) == 3 else None,
                          timeout=90, what="3 pods placed")
        nodes = {p["spec"]["nodeName"] for p in placed}
        racks = {admin.get(NODE, n)["metadata"]["labels"].get(RACK) for n in nodes}
        assert len(racks) == 1 and None not in racks, {n: racks for n in nodes}
        assert len(nodes) == 2, nodes  # a node holds 2 of them: the rack, not one node, holds the job
        # Kueue placed them by the request we rendered, not by chance
        (workload,) = [w for w in admin.list(WORKLOAD, kube.namespace)[0] if f"-{ref.name}-" in w["metadata"]["name"]]
        requests = [(ps.get("topologyRequest") or {}).get("required") for ps in workload["spec"]["podSets"]]
        assert RACK in requests, workload["spec"]["podSets"]
        assert all(ps.get("topologyAssignment") for ps in workload["status"]["admission"]["podSetAssignments"]
                   if (ps.get("count") or 0) > 0 and ps["name"] != "submitter")
    finally:
        runner.delete(ref)
        # the pool is small: the next test starts on empty nodes
        wait_for(lambda: not job_pods(admin, kube.namespace, ref.name) or None, timeout=60, what="the pods gone")


def test_a_job_no_rack_can_hold_stays_queued_with_kueues_reason(tas_queue):
    """5 pods of 3 cpu fit the queue's quota (32 cpu) but no rack (4 such pods): all wait."""
    kube, admin = tas_queue
    runner = KubeRunner(kube, get_backend("jobset"))
    job = DLCJob(image=IMAGE, command=list(COMMAND), resources={"cpu": "3", "memory": "1Gi"},
                 scheduling={"queue": "team-tas", "topology": {"required": RACK}},
                 type="pytorch", roles={"master": 1, "worker": 4})
    ref, _ = runner.submit(job, unique_name("tas-big"), IDENTITY, 1)
    try:
        def kueues_reason():
            status = runner.status(ref)
            return status if status.message.startswith("Kueue:") else None

        status = wait_for(kueues_reason, timeout=60, what="Kueue's reason on the job's status")
        assert (status.state, status.reason) == (JobState.QUEUED, reasons.SUSPENDED), status.summary()
        assert 'topology "racks"' in status.message, status.message
        time.sleep(3)  # would anything start anyway?
        assert job_pods(admin, kube.namespace, ref.name) == []
    finally:
        runner.delete(ref)
