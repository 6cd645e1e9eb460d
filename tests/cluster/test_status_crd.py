"""JobStatus of the CRD backends on status written through the real API server.

For states the real controllers cannot reach here (tests/cluster/test_controllers.py runs
every backend through them): the job is created as the restricted identity with `managedBy:
kueue.x-k8s.io/multikueue`, so its controller leaves it alone (as for a MultiKueue job, whose
status a manager cluster copies from a worker cluster), and the test writes status the way the
upstream controller does (its condition types, reasons and messages, counters, times) through
the status subresource as an administrator, with strict field validation so the CRD's status
schema must accept every field, and reads it back through the restricted identity with
KubeRunner.status (the waiting side's path).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.backends.base import KUEUE_QUEUE_LABEL
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import Conflict
from dlc_airflow.k8s.kinds import kind_of, ref_kinds
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, missing_fields, unique_name

T0 = datetime.now(UTC).replace(microsecond=0)


def at(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # every one of these controllers skips such a job


class ManagedElsewhere:
    """A backend whose primary object is managed by MultiKueue, not by its controller here."""

    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def render(self, *args, **kwargs):
        objects = self._backend.render(*args, **kwargs)
        # nor Kueue: a suspended job stays as the test writes it (no Workload's verdict)
        objects[0]["metadata"]["labels"].pop(KUEUE_QUEUE_LABEL, None)
        spec = objects[0]["spec"]
        (spec.setdefault("runPolicy", {}) if objects[0]["apiVersion"] == "kubeflow.org/v1" else spec)["managedBy"] = MULTIKUEUE
        return objects


class Controller:
    """Acts as the upstream controller of one created job: writes its status."""

    def __init__(self, kube: KubeClient, admin: KubeClient, backend: str, job: DLCJob, prefix: str):
        self.runner = KubeRunner(kube, ManagedElsewhere(get_backend(backend)))
        self.admin = admin
        self.name = unique_name(prefix)
        self.ref, _ = self.runner.submit(job, self.name, IDENTITY, 1)
        self.obj = kube.get(ref_kinds(self.ref)[0], self.name)

    def admit(self, patch: dict) -> None:
        """Resume the suspended job, as Kueue does when it admits it."""
        self.obj = self.admin.patch(ref_kinds(self.ref)[0], self.name, patch, namespace=self.obj["metadata"]["namespace"])

    def write(self, status: dict):
        """PUT .../status (strict): the CRD's status schema must take every field as written."""
        path = kind_of(self.obj).path(self.obj["metadata"]["namespace"], self.name, "status")
        for _ in range(5):  # Kueue annotates queued jobs: write on the newest copy
            current = self.admin.get(ref_kinds(self.ref)[0], self.name, namespace=self.obj["metadata"]["namespace"])
            try:
                self.obj = self.admin.request("PUT", path, body={**current, "status": status},
                                              query={"fieldValidation": "Strict"})
                break
            except Conflict:
                continue
        else:
            raise AssertionError(f"{self.name}: status write kept conflicting")
        assert missing_fields(status, self.obj.get("status", {}), "status") == [], "the API server dropped status"
        return self.runner.status(self.ref)


def counts(status):
    return {r: (c.replicas, c.active, c.succeeded, c.failed) for r, c in status.roles.items()}


# -- Kubeflow Training Operator v1 --------------------------------------------------------------------


def kf_cond(ctype: str, reason: str, message: str, t: int, status: str = "True") -> dict:
    """commonv1.JobCondition as the training-operator writes it."""
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastUpdateTime": at(t), "lastTransitionTime": at(t)}


def replica_status(job_name: str, rtype: str, operator: str, **counters) -> dict:
    labels = {"training.kubeflow.org/job-name": job_name, "training.kubeflow.org/operator-name": operator,
              "training.kubeflow.org/replica-type": rtype.lower()}
    return {**counters, "labelSelector": {"matchLabels": labels},
            "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}


def test_pytorchjob_lifecycle(kube, admin):
    job = DLCJob(type="pytorch", image=IMAGE, command=COMMAND, roles={"master": 1, "worker": 3},
                 fault_tolerance={"max_restarts": 3})
    c = Controller(kube, admin, "kubeflow", job, "ptj")
    ns, name = kube.namespace, c.name

    def rs(**per_type):
        return {t: replica_status(name, t, "pytorchjob-controller", **n) for t, n in per_type.items()}

    created = kf_cond("Created", "PyTorchJobCreated", f"PyTorchJob {ns}/{name} is created.", 0)
    s = c.write({"conditions": [created], "replicaStatuses": {}})
    assert (s.state, s.reason) == (JobState.PENDING, "PyTorchJobCreated")

    running = kf_cond("Running", "PyTorchJobRunning", f"PyTorchJob {ns}/{name} is running.", 5)
    s = c.write({"conditions": [created, running], "startTime": at(5), "lastReconcileTime": at(5),
                 "replicaStatuses": rs(Master={"active": 1}, Worker={"active": 3})})
    assert s.state is JobState.RUNNING and s.restarts == 0
    assert counts(s) == {"master": (1, 1, 0, 0), "worker": (3, 3, 0, 0)}
    assert s.started == T0 + timedelta(seconds=5)

    # The operator drops Running when it sets Restarting (and the reverse).
    restarting = kf_cond("Restarting", "PyTorchJobRestarting",
                         f"PyTorchJob {ns}/{name} is restarting because 1 Worker replica(s) failed.", 60)
    s = c.write({"conditions": [created, restarting], "startTime": at(5),
                 "replicaStatuses": rs(Master={"active": 1}, Worker={"active": 2, "failed": 1})})
    assert (s.state, s.restarts) == (JobState.RESTARTING, 1)
    assert "1 Worker replica(s) failed" in s.message

    running = kf_cond("Running", "PyTorchJobRunning", f"PyTorchJob {ns}/{name} is running.", 70)
    s = c.write({"conditions": [created, running], "startTime": at(5),
                 "replicaStatuses": rs(Master={"active": 1}, Worker={"active": 3, "failed": 1})})
    assert (s.state, s.restarts) == (JobState.RUNNING, 1)

    done = kf_cond("Succeeded", "PyTorchJobSucceeded", f"PyTorchJob {ns}/{name} successfully completed.", 600)
    s = c.write({"conditions": [created, {**running, "status": "False"}, done], "startTime": at(5),
                 "completionTime": at(600),
                 "replicaStatuses": rs(Master={"succeeded": 1}, Worker={"succeeded": 3, "failed": 1})})
    assert (s.state, s.reason) == (JobState.SUCCEEDED, reasons.COMPLETED) and s.terminal
    assert s.finished == T0 + timedelta(seconds=600)
    assert counts(s) == {"master": (1, 0, 1, 0), "worker": (3, 0, 3, 1)}


def test_tfjob_suspended_then_succeeded_with_ps_still_up(kube, admin):
    job = DLCJob(type="tensorflow", image=IMAGE, command=COMMAND,
                 roles={"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}, scheduling={"queue": "team-ml"})
    c = Controller(kube, admin, "kubeflow", job, "tfj")
    ns, name = kube.namespace, c.name
    assert c.runner.status(c.ref).state is JobState.QUEUED  # runPolicy.suspend, before any status

    def rs(**per_type):
        return {t: replica_status(name, t, "tfjob-controller", **n) for t, n in per_type.items()}

    created = kf_cond("Created", "TFJobCreated", f"TFJob {ns}/{name} is created.", 0)
    suspended = kf_cond("Suspended", "TFJobSuspended", f"TFJob {ns}/{name} is suspended.", 0)
    s = c.write({"conditions": [created, suspended], "replicaStatuses": {}})
    assert (s.state, s.reason) == (JobState.QUEUED, "Suspended") and "is suspended" in s.message

    c.admit({"spec": {"runPolicy": {"suspend": False}}})
    resumed = {**suspended, "status": "False", "reason": "TFJobResumed", "message": f"TFJob {ns}/{name} is resumed."}
    running = kf_cond("Running", "TFJobRunning", f"TFJob {ns}/{name} is running.", 30)
    s = c.write({"conditions": [created, resumed, running], "startTime": at(30),
                 "replicaStatuses": rs(Chief={"active": 1}, PS={"active": 2}, Worker={"active": 3},
                                       Evaluator={"active": 1})})
    assert s.state is JobState.RUNNING
    assert counts(s) == {"chief": (1, 1, 0, 0), "ps": (2, 2, 0, 0), "worker": (3, 3, 0, 0),
                         "evaluator": (1, 1, 0, 0)}

    done = kf_cond("Succeeded", "TFJobSucceeded", f"TFJob {ns}/{name} successfully completed.", 900)
    s = c.write({"conditions": [created, resumed, {**running, "status": "False"}, done], "startTime": at(30),
                 "completionTime": at(900),
                 "replicaStatuses": rs(Chief={"succeeded": 1}, PS={"active": 2}, Worker={"succeeded": 3},
                                       Evaluator={"succeeded": 1})})
    assert s.state is JobState.SUCCEEDED and counts(s)["ps"] == (2, 2, 0, 0)


def test_mpijob_failed_names_the_replica(kube, admin):
    job = DLCJob(type="mpi", image=IMAGE, command=COMMAND, roles={"launcher": 1, "worker": 2})
    c = Controller(kube, admin, "kubeflow", job, "mpij")
    ns, name = kube.namespace, c.name
    created = kf_cond("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.", 0)
    running = kf_cond("Running", "MPIJobRunning", f"MPIJob {ns}/{name} is running.", 5)
    rs = {"Launcher": replica_status(name, "Launcher", "mpijob-controller", active=1),
          "Worker": replica_status(name, "Worker", "mpijob-controller", active=2)}
    assert c.write({"conditions": [created, running], "startTime": at(5), "replicaStatuses": rs}).state \
        is JobState.RUNNING
    failed = kf_cond("Failed", "MPIJobFailed",
                     f"MPIJob {ns}/{name} is failed because 1 Launcher replica(s) failed.", 50)
    rs = {"Launcher": replica_status(name, "Launcher", "mpijob-controller", failed=1),
          "Worker": replica_status(name, "Worker", "mpijob-controller", active=2)}
    s = c.write({"conditions": [created, {**running, "status": "False"}, failed], "startTime": at(5),
                 "completionTime": at(50), "replicaStatuses": rs})
    # restartPolicy Never (max_restarts 0): the first failure used up the restarts
    assert (s.state, s.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED)
    assert "1 Launcher replica(s) failed" in s.message and s.finished == T0 + timedelta(seconds=50)
    assert counts(s) == {"launcher": (1, 0, 0, 1), "worker": (2, 2, 0, 0)}


def test_xgboostjob_backoff_limit(kube, admin):
    # worker-only: the backend runs worker 0 as the XGBoostJob's Master
    job = DLCJob(type="xgboost", image=IMAGE, command=COMMAND, roles={"worker": 3}, fault_tolerance={"max_restarts": 2})
    c = Controller(kube, admin, "kubeflow", job, "xgbj")
    ns, name = kube.namespace, c.name
    created = kf_cond("Created", "XGBoostJobCreated", f"XGBoostJob {ns}/{name} is created.", 0)
    running = kf_cond("Running", "XGBoostJobRunning", f"XGBoostJob {ns}/{name} is running.", 5)

    def rs(master: dict, worker: dict) -> dict:
        return {"Master": replica_status(name, "Master", "xgboostjob-controller", **master),
                "Worker": replica_status(name, "Worker", "xgboostjob-controller", **worker)}

    s = c.write({"conditions": [created, running], "startTime": at(5),
                 "replicaStatuses": rs({"active": 1}, {"active": 2})})
    assert s.state is JobState.RUNNING and counts(s) == {"master": (1, 1, 0, 0), "worker": (2, 2, 0, 0)}
    failed = kf_cond("Failed", "XGBoostJobFailed",
                     f"Job {name} has failed because it has reached the specified backoff limit", 300)
    s = c.write({"conditions": [created, {**running, "status": "False"}, failed], "startTime": at(5),
                 "replicaStatuses": rs({"active": 1}, {"active": 1, "failed": 3})})
    assert (s.state, s.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED) and "backoff limit" in s.message
    assert s.finished == T0 + timedelta(seconds=300) and counts(s)["worker"] == (2, 1, 0, 3)


# -- Kubeflow Trainer v2 (conditions copied from its JobSet; jobsStatus per replicatedJob) ----------


def meta_cond(ctype: str, reason: str, message: str, t: int, status: str = "True") -> dict:
    """metav1.Condition (JobSet, TrainJob): reason and message are required."""
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at(t), "observedGeneration": 1}


def job_status(name: str, *, ready=0, active=0, succeeded=0, failed=0, suspended=0) -> dict:
    return {"name": name, "ready": ready, "active": active, "succeeded": succeeded, "failed": failed,
            "suspended": suspended}


def test_trainjob_complete(kube, admin):
    job = DLCJob(type="pytorch", image=IMAGE, command=COMMAND, roles={"worker": 3}, nproc_per_node=4)
    c = Controller(kube, admin, "trainer", job, "trj")
    assert c.runner.status(c.ref).state is JobState.PENDING
    s = c.write({"jobsStatus": [job_status("node", active=1)]})
    assert s.state is JobState.PENDING  # the Job exists, its pods are not ready
    s = c.write({"jobsStatus": [job_status("node", ready=1, active=1)]})
    assert s.state is JobState.RUNNING and counts(s) == {"worker": (3, 3, 0, 0)}
    done = meta_cond("Complete", "AllJobsCompleted", "jobset completed successfully", 400)
    s = c.write({"conditions": [done], "jobsStatus": [job_status("node", succeeded=1)]})
    assert (s.state, s.reason) == (JobState.SUCCEEDED, reasons.COMPLETED)
    assert s.finished == T0 + timedelta(seconds=400) and counts(s) == {"worker": (3, 0, 3, 0)}


def test_trainjob_suspended_then_failed(kube, admin):
    job = DLCJob(type="deepspeed", launcher="mpi", image=IMAGE, command=COMMAND, roles={"worker": 2},
                 scheduling={"queue": "team-ml"}, max_running_time="1h")
    c = Controller(kube, admin, "trainer", job, "trjf")
    suspended = meta_cond("Suspended", "Suspended", "TrainJob is suspended", 0)
    s = c.write({"conditions": [suspended], "jobsStatus": [job_status("launcher", suspended=1),
                                                          job_status("node", suspended=1)]})
    assert (s.state, s.reason, s.message) == (JobState.QUEUED, "Suspended", "TrainJob is suspended")
    c.admit({"spec": {"suspend": False}})
    resumed = {**suspended, "status": "False", "reason": "Resumed", "message": "TrainJob is resumed"}
    s = c.write({"conditions": [resumed], "jobsStatus": [job_status("launcher", ready=1, active=1),
                                                        job_status("node", ready=1, active=1)]})
    assert s.state is JobState.RUNNING and counts(s) == {"worker": (2, 2, 0, 0), "launcher": (1, 1, 0, 0)}
    failed = meta_cond("Failed", "FailedJobs",
                       f"jobset failed due to one or more job failures (first failed job: {c.name}-launcher-0)", 90)
    s = c.write({"conditions": [resumed, failed], "jobsStatus": [job_status("launcher", failed=1),
                                                                job_status("node", active=1)]})
    assert (s.state, s.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED)
    assert f"first failed job: {c.name}-launcher-0" in s.message
    assert counts(s)["launcher"] == (1, 0, 0, 1)


def test_trainjob_deadline_exceeded(kube, admin):
    job = DLCJob(type="pytorch", image=IMAGE, command=COMMAND, roles={"worker": 2}, max_running_time=600)
    c = Controller(kube, admin, "trainer", job, "trjd")
    failed = meta_cond("Failed", "DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds", 600)
    s = c.write({"conditions": [failed], "jobsStatus": [job_status("node", failed=1)]})
    assert (s.state, s.reason) == (JobState.FAILED, reasons.DEADLINE_EXCEEDED)


# -- JobSet ---------------------------------------------------------------------------------------------


def test_jobset_restart_then_complete(kube, admin):
    job = DLCJob(type="pytorch", image=IMAGE, command=COMMAND, roles={"master": 1, "worker": 2},
                 fault_tolerance={"max_restarts": 2})
    c = Controller(kube, admin, "jobset", job, "jsr")
    s = c.write({"restarts": 0, "replicatedJobsStatus": [job_status("master", ready=1, active=1),
                                                          job_status("worker", ready=1, active=1)]})
    assert s.state is JobState.RUNNING and counts(s) == {"master": (1, 1, 0, 0), "worker": (2, 2, 0, 0)}
    s = c.write({"restarts": 1, "restartsCountTowardsMax": 1,
                 "replicatedJobsStatus": [job_status("master", active=1), job_status("worker", failed=1)]})
    assert (s.state, s.restarts) == (JobState.RESTARTING, 1)
    s = c.write({"restarts": 1, "restartsCountTowardsMax": 1,
                 "replicatedJobsStatus": [job_status("master", ready=1, active=1),
                                          job_status("worker", ready=1, active=1)]})
    assert (s.state, s.restarts) == (JobState.RUNNING, 1)
    done = meta_cond("Completed", "AllJobsCompleted", "jobset completed successfully", 800)
    s = c.write({"conditions": [done], "restarts": 1, "restartsCountTowardsMax": 1, "terminalState": "Completed",
                 "replicatedJobsStatus": [job_status("master", succeeded=1), job_status("worker", succeeded=1)]})
    assert (s.state, s.reason, s.restarts) == (JobState.SUCCEEDED, reasons.COMPLETED, 1)
    assert s.finished == T0 + timedelta(seconds=800) and counts(s)["worker"] == (2, 0, 2, 0)


@pytest.mark.parametrize("reason, message, restarts, ours", [
    ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts", 2, reasons.RESTART_LIMIT_EXCEEDED),
    # our FailOnPermanentError rule with no container exit code in the pods: the child Job's
    # deadline (the permanent exit code is in test_controllers.py, through the controller)
    ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action", 0, reasons.DEADLINE_EXCEEDED),
])
def test_jobset_failed(kube, admin, reason, message, restarts, ours):
    job = DLCJob(type="tensorflow", image=IMAGE, command=COMMAND, roles={"chief": 1, "ps": 1, "worker": 2},
                 fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]})
    c = Controller(kube, admin, "jobset", job, "jsf")
    full_message = f"{message} (first failed job: {c.name}-worker-0)"
    failed = meta_cond("Failed", reason, full_message, 120)
    s = c.write({"conditions": [failed], "restarts": restarts, "restartsCountTowardsMax": restarts,
                 "terminalState": "Failed",
                 "replicatedJobsStatus": [job_status("chief", active=1), job_status("ps", active=1),
                                          job_status("worker", failed=1)]})
    assert (s.state, s.reason, s.message, s.restarts) == (JobState.FAILED, ours, full_message, restarts)
    assert counts(s)["worker"] == (2, 0, 0, 2)


def test_jobset_suspended_by_kueue(kube, admin):
    job = DLCJob(type="batch", image=IMAGE, command=COMMAND, roles={"worker": 4}, scheduling={"queue": "team-ml"})
    c = Controller(kube, admin, "jobset", job, "jss")
    assert c.runner.status(c.ref).state is JobState.QUEUED
    suspended = meta_cond("Suspended", "SuspendedJobs", "jobset is suspended", 0)
    s = c.write({"conditions": [suspended], "replicatedJobsStatus": [job_status("worker", suspended=1)]})
    assert (s.state, s.reason, s.message) == (JobState.QUEUED, "Suspended", "jobset is suspended")


# -- KubeRay RayJob ------------------------------------------------------------------------------------


def ray_status(deployment: str, job_status_: str = "", **extra) -> dict:
    status = {"jobDeploymentStatus": deployment, "observedGeneration": 1, "failed": 0, "succeeded": 0, **extra}
    if job_status_:
        status["jobStatus"] = job_status_
    return status


def ray_cluster(name: str, ready_workers: int, workers: int) -> dict:
    return {"rayClusterName": f"{name}-x7k2p", "dashboardURL": f"{name}-x7k2p-head-svc.ns.svc.cluster.local:8265",
            "rayClusterStatus": {"state": "ready", "readyWorkerReplicas": ready_workers,
                                 "availableWorkerReplicas": ready_workers, "desiredWorkerReplicas": workers,
                                 "minWorkerReplicas": workers, "maxWorkerReplicas": workers,
                                 "desiredCPU": "12", "desiredMemory": "24Gi", "desiredGPU": "0", "desiredTPU": "0"}}


def test_rayjob_retry_then_complete(kube, admin):
    job = DLCJob(type="ray", image=IMAGE, command=COMMAND, roles={"head": 1, "worker": 2},
                 fault_tolerance={"max_restarts": 1})
    c = Controller(kube, admin, "ray", job, "rayj")
    s = c.write(ray_status("Initializing", startTime=at(0)))
    assert (s.state, s.reason) == (JobState.PENDING, "Initializing")
    s = c.write(ray_status("Running", "PENDING", startTime=at(0), jobId=f"{c.name}-abcde", **ray_cluster(c.name, 2, 2)))
    assert s.state is JobState.PENDING  # the cluster is up, the Ray job not yet
    running = ray_status("Running", "RUNNING", startTime=at(0), jobId=f"{c.name}-abcde", **ray_cluster(c.name, 2, 2))
    s = c.write(running)
    assert s.state is JobState.RUNNING
    assert counts(s) == {"head": (1, 0, 0, 0), "submitter": (1, 0, 0, 0), "worker": (2, 2, 0, 0)}
    s = c.write({**running, "jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "failed": 1,
                 "message": "Job entrypoint command failed with exit code 1"})
    assert (s.state, s.restarts) == (JobState.RESTARTING, 1)
    s = c.write({**running, "failed": 1})
    assert (s.state, s.restarts) == (JobState.RUNNING, 1)
    s = c.write({**running, "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "failed": 1,
                 "succeeded": 1, "endTime": at(700), "message": "Job finished successfully."})
    assert (s.state, s.restarts) == (JobState.SUCCEEDED, 1) and s.finished == T0 + timedelta(seconds=700)


@pytest.mark.parametrize("reason, job_state, failed, restarts, ours", [
    ("AppFailed", "FAILED", 2, 1, reasons.RESTART_LIMIT_EXCEEDED),  # backoffLimit 1: two runs failed, one restart
    ("DeadlineExceeded", "RUNNING", 1, 0, reasons.DEADLINE_EXCEEDED),  # KubeRay counts the run the deadline ended too
])
def test_rayjob_failed(kube, admin, reason, job_state, failed, restarts, ours):
    job = DLCJob(type="ray", image=IMAGE, command=COMMAND, roles={"head": 1}, max_running_time="1h",
                 fault_tolerance={"max_restarts": 1})
    c = Controller(kube, admin, "ray", job, "rayf")
    message = {"AppFailed": "Job entrypoint command failed with exit code 1, last available logs: ...",
               "DeadlineExceeded": f"The RayJob has passed the activeDeadlineSeconds. StartTime: {at(0)}. "
                                   "ActiveDeadlineSeconds: 3600"}[reason]
    s = c.write(ray_status("Failed", job_state, reason=reason, message=message, failed=failed,
                           startTime=at(0), endTime=at(3600)))
    assert (s.state, s.reason, s.message, s.restarts) == (JobState.FAILED, ours, message, restarts)
    assert s.finished == T0 + timedelta(seconds=3600)
