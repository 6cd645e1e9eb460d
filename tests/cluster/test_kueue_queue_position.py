"""Where a queued job stands, from Kueue's visibility API (v0.17.0, served by the Kueue
controller and registered as an aggregated API: scripts/k8s-controllers register_visibility),
as the restricted identity reads it (k8s/rbac/role.yaml), through the wait that writes the
task log, and on the report page's data.

A ClusterQueue of the test's own (16 on-demand GPUs) holds one running 16-GPU job; three more
jobs queue behind it in submit order.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from dlc_airflow.airflow.waiting import WaitIO
from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import ResourceKind
from dlc_airflow.k8s.queues import PENDING
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.progress import Progress
from dlc_airflow.report import job_report
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.cluster.polling import wait_for, wait_state
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, RUN_FOR, unique_name
from tests.support.cluster import (
    create_test_namespace,
    delete_namespace,
    ensure_local_queue,
    wait_local_queues_active,
)

CLUSTER_QUEUE = ResourceKind("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)


@pytest.fixture(scope="module")
def gpu_queue(controllers, admin):
    name = "vis-" + uuid.uuid4().hex[:6]
    admin.request("POST", CLUSTER_QUEUE.path(), body={"apiVersion": CLUSTER_QUEUE.api_version, "kind": "ClusterQueue", "metadata": {"name": name},
                  "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
                      "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                      "flavors": [{"name": "on-demand", "resources": [
                          {"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "512Gi"},
                          {"name": "nvidia.com/gpu", "nominalQuota": "16"}]}]}]}})
    ns = create_test_namespace(admin, prefix="vis")
    ensure_local_queue(admin, ns, name)
    wait_local_queues_active(admin, ns, (name,))
    yield controllers.restricted(ns), name
    delete_namespace(admin, ns)
    admin.delete(CLUSTER_QUEUE, name)


def gpu_job(queue: str, pods: int) -> DLCJob:
    return DLCJob(type="batch", image=IMAGE, command=list(COMMAND), roles={"worker": pods},
                  resources={"cpu": "1", "memory": "1Gi", "gpu": 8}, scheduling={"queue": queue},
                  annotations={RUN_FOR: "600s"})


def test_queued_jobs_know_their_place_and_what_is_ahead(gpu_queue, caplog):
    kube, queue = gpu_queue
    runner = KubeRunner(kube, get_backend("native"))
    refs = []
    try:
        running, _ = runner.submit(gpu_job(queue, 2), unique_name("vis-run"), IDENTITY, 1)
        refs.append(running)
        wait_state(runner, running, {JobState.RUNNING}, timeout=90)
        for i, pods in enumerate((2, 1, 1)):  # 16, 8 and 8 GPUs: none fits while the first runs
            time.sleep(1.1)  # Kueue orders by creation time, which counts whole seconds
            ref, _ = runner.submit(gpu_job(queue, pods), unique_name(f"vis-q{i}"), IDENTITY, 1)
            refs.append(ref)
        first, second, third = refs[1:]

        def said(ref, expected):
            PENDING._read.clear()  # a fresh read each poll (the shared reader caches for READ_EVERY)
            return runner.queue_position(ref) == expected or None

        wait_for(lambda: said(third, f"queue position 3 in LocalQueue {queue} (3 in its ClusterQueue); "
                                     "2 workloads ahead asking 24 GPUs"), timeout=60, what="the third's place")
        assert runner.queue_position(first) == \
            f"queue position 1 in LocalQueue {queue} (1 in its ClusterQueue); nothing ahead"
        assert runner.queue_position(second).startswith(f"queue position 2 in LocalQueue {queue} ")
        assert runner.queue_position(running) == ""  # admitted: not pending

        # the wait's turns write it to the task log once, however often they ask
        log = logging.getLogger("test.queue_position")
        progress = Progress(third.name, 0.0)
        wait = WaitIO(runner, third, log, progress)
        with caplog.at_level(logging.INFO, logger="test.queue_position"):
            wait.turn([(runner.status(third), [])], 0.0)
            reads = PENDING.requests
            for now in (10.0, 20.0, 30.0):
                wait.turn([], now)
            assert PENDING.requests - reads <= 1  # one shared read within READ_EVERY, not one per turn
        lines = [r.getMessage() for r in caplog.records if "queue position" in r.getMessage()]
        assert lines == [f"job {third.name}: queue position 3 in LocalQueue {queue} (3 in its ClusterQueue); "
                         "2 workloads ahead asking 24 GPUs"]

        # the report page's data
        report = job_report(runner, JobInfo(third, dag_id="d", task_id="t", run_id="r"))
        assert report["job"]["queue_position"].startswith("queue position 3 ")

        # the line moves up when the running job ends
        runner.delete(running)
        refs.remove(running)
        PENDING._read.clear()
        # the first (16 GPUs) is admitted in its place; the second is still ahead of the third
        wait_for(lambda: said(third, f"queue position 2 in LocalQueue {queue} (2 in its ClusterQueue); "
                                     "1 workload ahead asking 8 GPUs"), timeout=60, what="the third to move up")
        assert runner.queue_position(first) == ""
    finally:
        for ref in refs:
            runner.delete(ref)
