"""Kueue takes quota back, on the local control plane's quota system (k8s/cluster/kueue.yaml):

- priority: in team-a, a `production` job preempts an `experiment` job that holds the GPUs
  it needs (withinClusterQueue: LowerPriority);
- idle resources: team-a borrows team-b's idle GPUs, and team-b claims them back by
  preempting team-a's job (reclaimWithinCohort: Any), the DLC service's "idle resources".

The preempted job is suspended by Kueue (its controller removes the pods) and requeued. Our
status says so in Kueue's words: RESTARTING (reason Preempted, counted as a restart) when the
job's fault tolerance restarts on preemption, and it runs again once admitted; FAILED when it
does not (restart_on_preemption off), and the job is then stopped, so Kueue cannot run it
again. Both through the shared watches the deferred wait uses.

Every job here asks for the on-demand flavor (its node label): otherwise Kueue would rather
place a preemptor on spot quota than preempt (flavorFungibility: TryNextFlavor), and the GPU
nodes are exactly the on-demand quota (3 x 8 GPUs).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import JOBSET, POD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.runner import Replica
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus
from tests.cluster.polling import wait_for, wait_state
from tests.cluster.specs import CLUSTER_QUEUE, COMMAND, IDENTITY, IMAGE, RUN_FOR, unique_name
from tests.support.cluster import create_test_namespace, delete_namespace

ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}


def gpu_job(workers: int, gpus: int, queue: str, *, priority: str | None = None, run_for: str = "20s",
            restart_on_preemption: bool = True) -> DLCJob:
    return DLCJob(type="pytorch", image=IMAGE, command=list(COMMAND), roles={"worker": workers},
                  resources={"cpu": "4", "memory": "16Gi", "gpu": gpus},
                  scheduling={"queue": queue, "queue_priority": priority, "node_selector": ON_DEMAND},
                  fault_tolerance={"restart_on_preemption": restart_on_preemption},
                  annotations={RUN_FOR: run_for})


def on_demand_gpus(admin, cluster_queue: str) -> dict:
    """Kueue's own accounting of a ClusterQueue's on-demand GPUs: {"total": held, "borrowed": ...}."""
    found = admin.request("GET", CLUSTER_QUEUE.path(None, cluster_queue))
    for flavor in (found.get("status") or {}).get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            if flavor["name"] == "on-demand" and resource["name"] == "nvidia.com/gpu":
                return {k: int(resource.get(k) or 0) for k in ("total", "borrowed")}
    return {"total": 0, "borrowed": 0}


class Watched:
    """Every status the shared watches report for a job (what the deferred wait sees)."""

    def __init__(self, runner: KubeRunner, ref):
        self.seen: list[JobStatus] = []
        self._lock = threading.Lock()
        self.follower = runner.follow(ref)
        self.follower.start(self._on_status)

    def _on_status(self, status: JobStatus, replicas: Sequence[Replica]) -> None:
        with self._lock:
            self.seen.append(status)

    def states(self) -> list[tuple[JobState, str]]:
        with self._lock:
            return [(s.state, s.reason) for s in self.seen]

    def close(self) -> None:
        self.follower.close()


@pytest.fixture
def quota(controllers, admin, request):
    """A namespace with LocalQueues team-a and team-b, once the teams hold no GPUs (jobs of
    earlier tests gone), and a runner of the restricted identity (jobset unless parametrized)."""
    backend = getattr(request, "param", "jobset")
    wait_for(lambda: not any(on_demand_gpus(admin, team)["total"] for team in ("team-a", "team-b")), timeout=120,
             what="the teams' GPUs to be free")
    ns = create_test_namespace(admin, prefix="kp")
    runner = KubeRunner(controllers.restricted(ns), get_backend(backend))
    started: list = []
    yield runner, admin, started
    for ref in started:
        runner.delete(ref)
    delete_namespace(admin, ns)


def submit(runner: KubeRunner, started: list, job: DLCJob, name: str):
    ref, _ = runner.submit(job, unique_name(name), IDENTITY, 1)
    started.append(ref)
    return ref


@pytest.mark.parametrize("quota", ["jobset", "native", "kubeflow", "trainer"], indirect=True)
def test_a_production_job_preempts_an_experiment_which_runs_again(quota):
    runner, admin, started = quota
    # the experiment takes all 24 on-demand GPUs: team-a's 12 and the 12 it borrows from team-b
    low = submit(runner, started, gpu_job(3, 8, "team-a", priority="experiment", run_for="25s"), "low")
    wait_state(runner, low, {JobState.RUNNING}, timeout=60)
    watched = Watched(runner, low)
    try:
        high = submit(runner, started, gpu_job(1, 8, "team-a", priority="production", run_for="3s"), "high")
        preempted = wait_state(runner, low, {JobState.RESTARTING}, timeout=60)
        assert preempted.reason == reasons.PREEMPTED and preempted.restarts == 1, preempted.summary()
        assert preempted.message.startswith("Kueue: Preempted to accommodate a workload") and \
            "prioritization in the ClusterQueue" in preempted.message, preempted.message
        assert wait_state(runner, high, {JobState.SUCCEEDED}, timeout=90).state is JobState.SUCCEEDED
        # admitted again once the production job is done: it runs to the end, the preemption counted
        done = wait_state(runner, low, {JobState.SUCCEEDED, JobState.FAILED}, timeout=150)
        assert (done.state, done.restarts) == (JobState.SUCCEEDED, 1), done.summary()
        assert (JobState.RESTARTING, reasons.PREEMPTED) in watched.states(), watched.states()
    finally:
        watched.close()


def test_team_b_reclaims_the_gpus_team_a_borrowed(quota):
    runner, admin, started = quota
    # 16 GPUs: team-a's 12 and 4 of team-b's idle ones
    borrower = submit(runner, started, gpu_job(2, 8, "team-a", run_for="25s"), "borrow")
    wait_state(runner, borrower, {JobState.RUNNING}, timeout=60)
    assert wait_for(lambda: on_demand_gpus(admin, "team-a")["borrowed"], timeout=30, what="team-a to borrow") == 4
    # team-b asks for its own 12: 8 are idle, the other 4 are team-a's borrowed ones
    owner = submit(runner, started, gpu_job(3, 4, "team-b", run_for="3s"), "owner")
    reclaimed = wait_state(runner, borrower, {JobState.RESTARTING}, timeout=60)
    assert reclaimed.reason == reasons.PREEMPTED and "reclamation within the cohort" in reclaimed.message, \
        reclaimed.summary()
    assert wait_state(runner, owner, {JobState.SUCCEEDED}, timeout=90).state is JobState.SUCCEEDED
    done = wait_state(runner, borrower, {JobState.SUCCEEDED, JobState.FAILED}, timeout=150)
    assert (done.state, done.restarts) == (JobState.SUCCEEDED, 1), done.summary()


def test_a_job_that_does_not_restart_on_preemption_fails_and_is_stopped(quota):
    """restart_on_preemption off: the preemption fails the job with Kueue's message, and settling
    it (as the task does after its verdict) deletes it: Kueue would otherwise run it again."""
    runner, admin, started = quota
    borrower = submit(runner, started, gpu_job(2, 8, "team-a", run_for="60s", restart_on_preemption=False),
                      "nopre")
    wait_state(runner, borrower, {JobState.RUNNING}, timeout=60)
    watched = Watched(runner, borrower)
    try:
        submit(runner, started, gpu_job(3, 4, "team-b", run_for="3s"), "owner")
        failed = wait_state(runner, borrower, {JobState.FAILED}, timeout=60)
        assert failed.reason == reasons.PREEMPTED and "restart_on_preemption is off" in failed.message, \
            failed.summary()
        wait_for(lambda: (JobState.FAILED, reasons.PREEMPTED) in watched.states(), timeout=30,
                 what="the preemption through the watches")
    finally:
        watched.close()
    assert runner.settle(borrower) == [borrower.name]
    kube = runner.client
    wait_for(lambda: kube.get(JOBSET, borrower.name) is None and not [
        p for p in admin.list(POD, kube.namespace)[0] if p["metadata"]["name"].startswith(borrower.name)],
        timeout=60, what="the preempted job and its pods to be gone")
