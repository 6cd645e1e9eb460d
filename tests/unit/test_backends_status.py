"""Status mapping: server objects (shaped as the upstream controllers write them) -> JobStatus."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dlc_airflow import naming, reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts

NAME = "demo-0123abcd-1"
T0, T1, T2, T3 = "2026-12-02T10:00:00Z", "2026-12-02T10:00:05Z", "2026-12-02T10:05:00Z", "2026-12-02T11:00:00Z"


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def cond(ctype, reason="", message="", at=T2, status="True"):
    c = {"type": ctype, "status": status, "lastProbeTime": at, "lastTransitionTime": at}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def batch_job(role, completions, status, created=T0):
    """A role Job as the API server returns it (spec from our render, status from the controller)."""
    job = DLCJob(type="pytorch", image="img", command=["python", "t.py"], roles={role: completions} if role != "master" else {"master": 1, "worker": 1})
    obj = next(o for o in get_backend("native").render(job, NAME) if o["metadata"]["name"] == f"{NAME}-{role}")
    obj["metadata"].update({"creationTimestamp": created, "uid": f"uid-{role}", "namespace": "ml"})
    obj["status"] = status
    return obj


def pod(name, role, phase="Running", conditions=(), containers=(), init=(), reason=None, message=None, start=T1):
    st = {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers),
          "startTime": start}
    if init:
        st["initContainerStatuses"] = list(init)
    if reason:
        st["reason"] = reason
    if message:
        st["message"] = message
    return {"metadata": {"name": name, "labels": {naming.LABEL_JOB: NAME, naming.LABEL_ROLE: role}}, "status": st}


def terminated(name, code, reason="Error", message=None, finished=T2):
    term = {"exitCode": code, "reason": reason, "startedAt": T1, "finishedAt": finished, "containerID": "containerd://x"}
    if message:
        term["message"] = message
    return {"name": name, "state": {"terminated": term}, "lastState": {}, "ready": False, "restartCount": 0,
            "image": "img", "imageID": "", "started": False}


UNSCHEDULABLE = "0/6 nodes are available: 6 Insufficient nvidia.com/gpu. preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."


# -- native ---------------------------------------------------------------------------------------


native = get_backend("native")


def test_native_empty_is_stopped_not_found():
    s = native.status([])
    assert s.state is JobState.STOPPED and s.reason == "NotFound" and s.terminal


def test_native_running_counts_and_times():
    master = batch_job("master", 1, {"startTime": T1, "active": 1, "ready": 1, "terminating": 0,
                                     "uncountedTerminatedPods": {}})
    worker = batch_job("worker", 3, {"startTime": T2, "active": 3, "ready": 3, "terminating": 0,
                                     "uncountedTerminatedPods": {}}, created=T1)
    s = native.status([master, worker])
    assert s.state is JobState.RUNNING
    assert s.roles["master"].replicas == 1 and s.roles["worker"].replicas == 3
    assert s.roles["worker"].active == 3
    assert s.created == ts(T0) and s.started == ts(T1) and s.finished is None and s.restarts == 0


def test_native_pending_until_ready_then_unschedulable_is_queued():
    worker = batch_job("worker", 2, {"startTime": T1, "active": 2, "ready": 0, "terminating": 0})
    assert native.status([worker]).state is JobState.PENDING
    pods = [
        pod(f"{NAME}-worker-0-abcde", "worker"),
        pod(f"{NAME}-worker-1-fghij", "worker", phase="Pending", containers=(), conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE,
             "lastTransitionTime": T1, "lastProbeTime": None}]),
    ]
    s = native.status([worker], pods)
    assert s.state is JobState.QUEUED and s.reason == "Unschedulable" and s.message == UNSCHEDULABLE
    assert not s.terminal


def test_native_suspended_by_kueue_is_queued():
    worker = batch_job("worker", 2, {"conditions": [cond("Suspended", "JobSuspended", "Job suspended")],
                                     "active": 0, "ready": 0})
    s = native.status([worker])
    assert s.state is JobState.QUEUED and s.reason == "Suspended" and s.message == "Job suspended"


def test_native_restarting_after_a_failed_pod():
    worker = batch_job("worker", 2, {"startTime": T1, "active": 2, "ready": 1, "failed": 1, "terminating": 0})
    s = native.status([worker])
    assert s.state is JobState.RESTARTING and s.restarts == 1
    healed = batch_job("worker", 2, {"startTime": T1, "active": 2, "ready": 2, "failed": 1, "terminating": 0})
    s = native.status([healed])
    assert s.state is JobState.RUNNING and s.restarts == 1


def test_native_failed_by_pod_failure_policy_with_exit_code_detail():
    msg = f"Container main for pod ml/{NAME}-worker-1-x7k2p failed with exit code 2 matching FailJob rule at index 1"
    worker = batch_job("worker", 2, {
        "conditions": [cond("FailureTarget", "PodFailurePolicy", msg, T2), cond("Failed", "PodFailurePolicy", msg, T3)],
        "startTime": T1, "failed": 1, "active": 0, "ready": 0, "terminating": 0, "failedIndexes": "1",
        "uncountedTerminatedPods": {}})
    master = batch_job("master", 1, {"startTime": T1, "active": 1, "ready": 1})
    s = native.status([master, worker])
    assert s.state is JobState.FAILED and s.reason == reasons.NON_RETRYABLE_EXIT
    assert msg in s.message and s.message.startswith("worker: ")
    assert s.finished == ts(T3)
    pods = [pod(f"{NAME}-worker-1-x7k2p", "worker", phase="Failed", containers=[terminated("main", 2)])]
    s = native.status([master, worker], pods)
    assert f"pod {NAME}-worker-1-x7k2p container main exited with code 2 (Error)" in s.message


def test_native_failure_target_alone_is_already_failed():
    # The controller sets FailureTarget first and Failed once the pods are gone.
    worker = batch_job("worker", 1, {"conditions": [cond("FailureTarget", "BackoffLimitExceeded",
                                                          "Job has reached the specified backoff limit")],
                                     "startTime": T1, "failed": 1, "terminating": 1})
    s = native.status([worker])
    assert s.state is JobState.FAILED and s.reason == reasons.RESTART_LIMIT_EXCEEDED


@pytest.mark.parametrize("reason, message, ours", [
    ("BackoffLimitExceeded", "Job has reached the specified backoff limit", reasons.RESTART_LIMIT_EXCEEDED),
    ("DeadlineExceeded", "Job was active longer than specified deadline", reasons.DEADLINE_EXCEEDED),
    ("MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes",
     reasons.RESTART_LIMIT_EXCEEDED),
    ("FailedIndexes", "Job has failed indexes", reasons.RESTART_LIMIT_EXCEEDED),
    ("PodFailurePolicy", "Container main for pod ml/x failed with exit code 2 matching FailJob rule at index 1",
     reasons.NON_RETRYABLE_EXIT),
])
def test_native_failed_reasons(reason, message, ours):
    worker = batch_job("worker", 2, {"conditions": [cond("FailureTarget", reason, message), cond("Failed", reason, message, T3)],
                                     "startTime": T1, "failed": 3})
    s = native.status([worker])
    # ours in reason, the Job controller's wording in the message
    assert (s.state, s.reason) == (JobState.FAILED, ours) and message in s.message


def test_native_oom_killed_detail():
    worker = batch_job("worker", 1, {"conditions": [cond("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")],
                                     "startTime": T1, "failed": 1})
    pods = [pod(f"{NAME}-worker-0-aaaaa", "worker", phase="Failed", containers=[terminated("main", 137, "OOMKilled")])]
    pods[0]["spec"] = {"containers": [{"name": "main", "resources": {"limits": {"memory": "96Mi"}}}]}
    s = native.status([worker], pods)
    assert ("exited with code 137 (OOMKilled): it ran out of memory: the kernel killed it for using more than its "
            "memory limit (96Mi); raise resources.memory") in s.message
    assert s.reason == "OOMKilled"  # whatever ended the Job after it: the retry policy reads it
    other = [pod(f"{NAME}-worker-0-aaaaa", "worker", phase="Failed", containers=[terminated("main", 1, "Error")])]
    assert native.status([worker], other).reason != "OOMKilled"


def test_native_a_replica_that_ran_keeps_the_job_running():
    """The pod finished before the Job controller counted it: active 1, ready 0 is not PENDING."""
    worker = batch_job("worker", 1, {"startTime": T1, "active": 1, "ready": 0, "terminating": 0})
    assert native.status([worker], [pod(f"{NAME}-worker-0-a", "worker", phase="Pending")]).state is JobState.PENDING
    done = pod(f"{NAME}-worker-0-a", "worker", phase="Succeeded", containers=[terminated("main", 0, "Completed")])
    s = native.status([worker], [done])
    assert (s.state, s.reason) == (JobState.RUNNING, "Running")


def test_native_failed_init_container_detail():
    worker = batch_job("worker", 1, {"conditions": [cond("Failed", "BackoffLimitExceeded", "")], "failed": 1})
    pods = [pod(f"{NAME}-worker-0-aaaaa", "worker", phase="Failed",
                init=[terminated("health-check", 3, "Error", "no GPU visible")], containers=[])]
    s = native.status([worker], pods)
    assert "init container health-check exited with code 3 (Error: no GPU visible)" in s.message


def test_native_evicted_pod_detail():
    worker = batch_job("worker", 1, {"conditions": [cond("Failed", "BackoffLimitExceeded", "")], "failed": 1})
    pods = [pod(f"{NAME}-worker-0-aaaaa", "worker", phase="Failed", reason="Evicted",
                message="The node was low on resource: memory.")]
    assert "failed: Evicted (The node was low on resource: memory.)" in native.status([worker], pods).message


def test_native_succeeded():
    master = batch_job("master", 1, {"conditions": [cond("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods", T2),
                                                    cond("Complete", "CompletionsReached", "Reached expected number of succeeded pods", T2)],
                                     "startTime": T1, "completionTime": T2, "succeeded": 1, "completedIndexes": "0"})
    worker = batch_job("worker", 2, {"conditions": [cond("SuccessCriteriaMet", "CompletionsReached", "", T3),
                                                    cond("Complete", "CompletionsReached", "", T3)],
                                     "startTime": T1, "completionTime": T3, "succeeded": 2, "completedIndexes": "0-1"})
    s = native.status([master, worker])
    assert s.state is JobState.SUCCEEDED and s.terminal
    assert s.finished == ts(T3) and s.roles["worker"].succeeded == 2
    # one role still running: not yet
    running = batch_job("worker", 2, {"startTime": T1, "active": 1, "ready": 1, "succeeded": 1})
    assert native.status([master, running]).state is JobState.RUNNING


def test_native_tensorflow_ps_does_not_block_success():
    job = DLCJob(type="tensorflow", image="img", command=["x"], roles={"chief": 1, "ps": 1, "worker": 2})
    objs = {o["metadata"]["name"]: o for o in native.render(job, NAME) if o["kind"] == "Job"}
    done = {"conditions": [cond("Complete", "CompletionsReached")], "completionTime": T2, "succeeded": 1, "startTime": T1}
    objs[f"{NAME}-chief"]["status"] = done
    objs[f"{NAME}-worker"]["status"] = {**done, "succeeded": 2}
    objs[f"{NAME}-ps"]["status"] = {"active": 1, "ready": 1, "startTime": T1}
    assert native.status(list(objs.values())).state is JobState.SUCCEEDED


def test_native_tensorflow_chief_decides_while_workers_and_evaluator_run():
    job = DLCJob(type="tensorflow", image="img", command=["x"],
                 roles={"chief": 1, "ps": 1, "worker": 2, "evaluator": 1})
    objs = {o["metadata"]["name"]: o for o in native.render(job, NAME) if o["kind"] == "Job"}
    running = {"active": 1, "ready": 1, "startTime": T1}
    for role in ("ps", "worker", "evaluator"):
        objs[f"{NAME}-{role}"]["status"] = running
    assert native.status(list(objs.values())).state is JobState.RUNNING
    objs[f"{NAME}-chief"]["status"] = {"conditions": [cond("Complete", "CompletionsReached")],
                                       "completionTime": T2, "succeeded": 1, "startTime": T1}
    assert native.status(list(objs.values())).state is JobState.SUCCEEDED
    assert sorted(native.leftovers(list(objs.values()))) == [f"{NAME}-{r}" for r in ("evaluator", "ps", "worker")]


def test_native_tensorflow_without_chief_worker_zero_decides():
    job = DLCJob(type="tensorflow", image="img", command=["x"], roles={"ps": 1, "worker": 3})
    objs = {o["metadata"]["name"]: o for o in native.render(job, NAME) if o["kind"] == "Job"}
    objs[f"{NAME}-ps"]["status"] = {"active": 1, "startTime": T1}
    objs[f"{NAME}-worker"]["status"] = {"active": 3, "startTime": T1, "completedIndexes": "1"}
    assert native.status(list(objs.values())).state is JobState.RUNNING  # worker 1 is not the one
    objs[f"{NAME}-worker"]["status"] = {"active": 2, "succeeded": 1, "startTime": T1, "completedIndexes": "0"}
    assert native.status(list(objs.values())).state is JobState.SUCCEEDED


# -- kubeflow -------------------------------------------------------------------------------------


kubeflow = get_backend("kubeflow")


def pytorchjob(conditions, replica_statuses=None, fault_tolerance=None, **status):
    job = DLCJob(type="pytorch", image="img", command=["x"], roles={"master": 1, "worker": 3},
                 fault_tolerance=fault_tolerance or {})
    obj = kubeflow.render(job, NAME)[0]
    obj["metadata"]["creationTimestamp"] = T0
    obj["status"] = {"conditions": conditions, "replicaStatuses": replica_statuses or {}, **status}
    return obj


def test_kubeflow_pytorchjob_lifecycle():
    created = cond("Created", "PyTorchJobCreated", f"PyTorchJob {NAME} is created.", T0)
    s = kubeflow.status([pytorchjob([created])])
    assert s.state is JobState.PENDING and s.roles["worker"].replicas == 3

    running = cond("Running", "PyTorchJobRunning", f"PyTorchJob ml/{NAME} is running.", T1)
    rs = {"Master": {"active": 1, "selector": "x"}, "Worker": {"active": 3, "selector": "y"}}
    s = kubeflow.status([pytorchjob([created, running], rs, startTime=T1)])
    assert s.state is JobState.RUNNING and s.roles["worker"].active == 3 and s.started == ts(T1)

    restarting = cond("Restarting", "PyTorchJobRestarting",
                      f"PyTorchJob {NAME} is restarting because 1 Worker replica(s) failed.", T2)
    rs = {"Master": {"active": 1}, "Worker": {"active": 2, "failed": 1}}
    s = kubeflow.status([pytorchjob([created, {**running, "status": "False"}, restarting], rs, startTime=T1)])
    assert s.state is JobState.RESTARTING and s.restarts == 1 and "restarting" in s.message

    succeeded = cond("Succeeded", "PyTorchJobSucceeded", f"PyTorchJob {NAME} is successfully completed.", T3)
    rs = {"Master": {"succeeded": 1}, "Worker": {"succeeded": 3}}
    s = kubeflow.status([pytorchjob([created, {**running, "status": "False"}, succeeded], rs,
                                    startTime=T1, completionTime=T3)])
    assert s.state is JobState.SUCCEEDED and s.finished == ts(T3) and s.roles["master"].succeeded == 1


def test_kubeflow_failed_and_suspended():
    failed = cond("Failed", "PyTorchJobFailed", f"PyTorchJob {NAME} is failed because 1 Worker replica(s) failed.", T3)
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), failed], {"Worker": {"failed": 1}}, startTime=T1)])
    # restartPolicy Never (max_restarts 0): the first failure used up the restarts
    assert s.state is JobState.FAILED and s.reason == reasons.RESTART_LIMIT_EXCEEDED
    assert "1 Worker replica(s) failed" in s.message
    assert s.finished == ts(T3) and s.restarts == 0
    # failed pods are not restarts: under the ExitCode policy the operator deletes the pods it
    # restarts, so the failed ones left are the replicas that failed the job (both at once here)
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), failed], {"Worker": {"failed": 2}}, startTime=T1)])
    assert s.state is JobState.FAILED and s.restarts == 0
    # restarts in place (OnFailure) are the containers' restart counts
    pod = {"metadata": {"name": f"{NAME}-worker-0"}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "pytorch", "restartCount": 2, "state": {"terminated": {"exitCode": 1}}}]}}
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), failed], {"Worker": {"failed": 1}}, startTime=T1)],
                        [pod])
    assert s.state is JobState.FAILED and s.restarts == 2
    evicted = cond("Failed", "PyTorchJobEvicted", "evicted", T3)  # a reason of the operator's own, kept
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), evicted], {"Worker": {"failed": 1}},
                                    fault_tolerance={"max_restarts": 2})])
    assert s.reason == "PyTorchJobEvicted"
    suspended = cond("Suspended", "PyTorchJobSuspended", f"PyTorchJob {NAME} is suspended.", T1)
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), suspended])])
    assert s.state is JobState.QUEUED and s.reason == "Suspended"


@pytest.mark.parametrize("message, ours", [
    (f"Job {NAME} has failed because it has reached the specified backoff limit", reasons.RESTART_LIMIT_EXCEEDED),
    (f"Job {NAME} has failed because it was active longer than specified deadline", reasons.DEADLINE_EXCEEDED),
])
def test_kubeflow_failure_reason_from_the_operators_message(message, ours):
    # The operator's reason is PyTorchJobFailed whatever the cause; its message tells.
    failed = cond("Failed", "PyTorchJobFailed", message, T3)
    s = kubeflow.status([pytorchjob([cond("Created", at=T0), failed], {"Worker": {"failed": 4}},
                                    fault_tolerance={"max_restarts": 3}, startTime=T1)])
    assert (s.state, s.reason, s.message) == (JobState.FAILED, ours, message)


def test_kubeflow_tfjob_roles():
    job = DLCJob(type="tensorflow", image="img", command=["x"], roles={"chief": 1, "ps": 2, "worker": 4})
    obj = kubeflow.render(job, NAME)[0]
    obj["status"] = {"conditions": [cond("Running", "TFJobRunning")],
                     "replicaStatuses": {"Chief": {"active": 1}, "PS": {"active": 2}, "Worker": {"active": 3, "succeeded": 1}}}
    s = kubeflow.status([obj])
    assert s.state is JobState.RUNNING
    assert {r: (c.replicas, c.active) for r, c in s.roles.items()} == {"chief": (1, 1), "ps": (2, 2), "worker": (4, 3)}


# -- jobset ---------------------------------------------------------------------------------------


jobset = get_backend("jobset")


def a_jobset(conditions=(), rjs=(), restarts=0, suspend=False):
    job = DLCJob(type="pytorch", image="img", command=["x"], roles={"master": 1, "worker": 2},
                 scheduling={"queue": "q"} if suspend else {})
    obj = jobset.render(job, NAME)[0]
    obj["metadata"]["creationTimestamp"] = T0
    obj["status"] = {"conditions": list(conditions), "replicatedJobsStatus": list(rjs), "restarts": restarts}
    return obj


def rjs(name, active=0, ready=0, succeeded=0, failed=0, suspended=0):
    return {"name": name, "active": active, "ready": ready, "succeeded": succeeded, "failed": failed, "suspended": suspended}


def test_jobset_completed():
    obj = a_jobset([cond("Completed", "AllJobsCompleted", "jobset completed successfully", T3)],
                   [rjs("master", succeeded=1), rjs("worker", succeeded=1)])
    s = jobset.status([obj])
    assert s.state is JobState.SUCCEEDED and s.finished == ts(T3)
    assert s.roles["worker"].replicas == 2 and s.roles["worker"].succeeded == 2


def test_jobset_failed_after_restarts():
    obj = a_jobset([cond("Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts", T3)],
                   [rjs("master"), rjs("worker", failed=1)], restarts=2)
    s = jobset.status([obj])
    assert s.state is JobState.FAILED and s.reason == reasons.RESTART_LIMIT_EXCEEDED and s.restarts == 2
    assert s.message == "jobset failed due to reaching max number of restarts"
    rule = a_jobset([cond("Failed", "FailJobSetFailurePolicyRuleAction",
                          "The child job failed with reason PodFailurePolicy", T3)], [rjs("worker", failed=1)])
    assert jobset.status([rule]).reason == "FailJobSetFailurePolicyRuleAction"


def test_jobset_running_restarting_suspended():
    running = a_jobset([], [rjs("master", active=1, ready=1), rjs("worker", active=1, ready=1)])
    assert jobset.status([running]).state is JobState.RUNNING
    restarting = a_jobset([], [rjs("master", active=1), rjs("worker", active=1)], restarts=1)
    s = jobset.status([restarting])
    assert s.state is JobState.RESTARTING and s.restarts == 1
    suspended = a_jobset([cond("Suspended", "SuspendedJobs", "jobset is suspended")], [rjs("master", suspended=1)], suspend=True)
    assert jobset.status([suspended]).state is JobState.QUEUED
    starting = a_jobset([], [rjs("master", active=1), rjs("worker", active=1)])
    pods = [pod(f"{NAME}-worker-0-0-abcde", "worker", phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}])]
    s = jobset.status([starting], pods)
    assert (s.state, s.message) == (JobState.QUEUED, UNSCHEDULABLE)
    assert jobset.status([]).reason == "NotFound"


# -- trainer --------------------------------------------------------------------------------------


trainer = get_backend("trainer")


def a_trainjob(conditions=(), jobs_status=()):
    job = DLCJob(type="pytorch", image="img", command=["x"], roles={"worker": 4})
    obj = trainer.render(job, NAME)[0]
    obj["metadata"]["creationTimestamp"] = T0
    obj["status"] = {"conditions": list(conditions), "jobsStatus": list(jobs_status)}
    return obj


def test_trainjob_states():
    s = trainer.status([a_trainjob([], [rjs("node", active=1, ready=1)])])
    assert s.state is JobState.RUNNING and s.roles["worker"].replicas == 4
    s = trainer.status([a_trainjob([cond("Complete", "JobsCompleted", "TrainJob is completed", T3)], [rjs("node", succeeded=1)])])
    assert s.state is JobState.SUCCEEDED and s.finished == ts(T3)
    s = trainer.status([a_trainjob([cond("Failed", "JobsFailed", "TrainJob is failed", T3)], [rjs("node", failed=1)])])
    assert s.state is JobState.FAILED and s.reason == "JobsFailed"
    # the JobSet's conditions, copied: a child Job that ran out of retries
    failed = cond("Failed", "FailedJobs", f"jobset failed due to one or more job failures (first failed job: {NAME}-node-0)", T3)
    s = trainer.status([a_trainjob([failed], [rjs("node", failed=1)])])
    assert (s.state, s.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED) and "first failed job" in s.message
    s = trainer.status([a_trainjob([cond("Suspended", "Suspended", "TrainJob is suspended")])])
    assert s.state is JobState.QUEUED
    assert trainer.status([a_trainjob([], [rjs("node", active=1)])]).state is JobState.PENDING


# -- ray ------------------------------------------------------------------------------------------


ray = get_backend("ray")


def a_rayjob(deployment, job_status="", **status):
    job = DLCJob(type="ray", image="rayproject/ray:2.40.0", command=["python", "job.py"], roles={"head": 1, "worker": 2})
    obj = ray.render(job, NAME)[0]
    obj["metadata"]["creationTimestamp"] = T0
    obj["status"] = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "startTime": T1, **status}
    return obj


@pytest.mark.parametrize("deployment, job_status, extra, state, reason", [
    ("Initializing", "", {}, JobState.PENDING, "Initializing"),
    ("Running", "PENDING", {}, JobState.PENDING, None),
    ("Running", "RUNNING", {}, JobState.RUNNING, "Running"),
    ("Complete", "SUCCEEDED", {"endTime": T3, "succeeded": 1}, JobState.SUCCEEDED, reasons.COMPLETED),
    ("Complete", "FAILED", {"endTime": T3, "reason": "AppFailed", "message": "Job entrypoint command failed with exit code 1"},
     JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED),
    ("Failed", "FAILED", {"endTime": T3, "reason": "AppFailed", "message": "Job entrypoint command failed with exit code 1",
                          "failed": 1}, JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED),
    ("Complete", "STOPPED", {"endTime": T3}, JobState.STOPPED, "Stopped"),
    ("Failed", "RUNNING", {"reason": "DeadlineExceeded",
                           "message": "The RayJob has passed the activeDeadlineSeconds. DeadlineSeconds: 60"},
     JobState.FAILED, "DeadlineExceeded"),
    ("Failed", "", {"reason": "SubmissionFailed", "message": "submitter Job failed", "failed": 1}, JobState.FAILED, "SubmissionFailed"),
    ("ValidationFailed", "", {"reason": "ValidationFailed", "message": "The RayJob spec is invalid"}, JobState.FAILED, "ValidationFailed"),
    ("Suspended", "", {}, JobState.QUEUED, "Suspended"),
    ("Retrying", "FAILED", {"failed": 1}, JobState.RESTARTING, "Retrying"),
])
def test_rayjob_states(deployment, job_status, extra, state, reason):
    s = ray.status([a_rayjob(deployment, job_status, **extra)])
    assert s.state is state
    if reason:
        assert s.reason == reason
    if "message" in extra:
        assert s.message == extra["message"]
    if "endTime" in extra:
        assert s.finished == ts(T3)
    assert s.started == ts(T1) and s.roles["worker"].replicas == 2


def test_rayjob_restarts_count():
    assert ray.status([a_rayjob("Running", "RUNNING", failed=2)]).restarts == 2
    assert ray.status([]).state is JobState.STOPPED


def test_pods_do_not_override_a_terminal_state():
    done = a_rayjob("Complete", "SUCCEEDED", endTime=T3)
    pods = [pod("x", "worker", phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}])]
    assert ray.status([done], pods).state is JobState.SUCCEEDED


def test_suspended_before_any_condition_is_queued():
    job = DLCJob(type="pytorch", image="img", command=["x"], roles={"worker": 2}, scheduling={"queue": "q"})
    for backend in ("native", "jobset", "kubeflow", "trainer"):
        b = get_backend(backend)
        objects = [o for o in b.render(job, NAME) if o["kind"] == b.kind(job).kind]
        s = b.status(objects)
        assert (s.state, s.reason) == (JobState.QUEUED, "Suspended"), backend
    rj = DLCJob(type="ray", image="img", command=["x"], scheduling={"queue": "q"})
    assert ray.status(ray.render(rj, NAME)).state is JobState.QUEUED


# -- restarts and finish times on terminal states (found on the real Job controller) ------------


def test_native_success_criteria_met_is_finished_before_complete():
    # The Job controller sets SuccessCriteriaMet first; Complete and completionTime follow once
    # the pods are gone.
    worker = batch_job("worker", 2, {"conditions": [cond("SuccessCriteriaMet", "CompletionsReached", "", T2)],
                                     "startTime": T1, "succeeded": 2, "failed": 1})
    s = native.status([worker])
    assert s.state is JobState.SUCCEEDED and s.finished == ts(T2)
    assert s.restarts == 1  # every failed pod of a job that succeeded was replaced


def test_native_failed_counts_restarts_before_the_last_failure():
    status = {"conditions": [cond("FailureTarget", "MaxFailedIndexesExceeded", "", T2),
                             cond("Failed", "MaxFailedIndexesExceeded", "", T3)],
              "startTime": T1, "failed": 4, "failedIndexes": "0,2"}
    worker = batch_job("worker", 3, status)
    assert native.status([worker]).restarts == 2  # 4 failed pods, 2 of them the indexes' last
    # a FailJob rule or the deadline: no index ran out of restarts
    pfp = batch_job("worker", 2, {"conditions": [cond("Failed", "PodFailurePolicy", "x", T3)],
                                  "startTime": T1, "failed": 2, "failedIndexes": ""})
    assert native.status([pfp]).restarts == 0


def test_native_failed_restarts_from_pods():
    from dlc_airflow.k8s.backends.podspec import COMPLETION_INDEX_ANNOTATION

    def replica(name, index, phase, created, disrupted=False):
        p = pod(name, "worker", phase=phase,
                conditions=[{"type": "DisruptionTarget", "status": "True"}] if disrupted else ())
        p["metadata"].update(annotations={COMPLETION_INDEX_ANNOTATION: str(index)}, creationTimestamp=created)
        return p

    worker = batch_job("worker", 2, {"conditions": [cond("Failed", "PodFailurePolicy", "x", T3)],
                                     "startTime": T1, "failed": 2, "failedIndexes": ""})
    pods = [replica("a", 0, "Failed", T0), replica("b", 0, "Failed", T1),  # restarted once, then FailJob
            replica("c", 1, "Failed", T0, disrupted=True), replica("d", 1, "Running", T1)]  # preempted
    assert native.status([worker], pods).restarts == 1


@pytest.mark.parametrize("deployment, job_status, failed, restarts", [
    ("Retrying", "FAILED", 1, 1),
    ("Running", "RUNNING", 1, 1),
    ("Complete", "SUCCEEDED", 1, 1),
    ("Failed", "FAILED", 3, 2),  # KubeRay counts the final failed run too
    ("Failed", "RUNNING", 1, 0),  # DeadlineExceeded: the run the deadline ended
])
def test_rayjob_restarts_on_every_state(deployment, job_status, failed, restarts):
    assert ray.status([a_rayjob(deployment, job_status, failed=failed)]).restarts == restarts


def test_native_leftovers_are_the_role_jobs_still_running():
    def role_job(role, status):
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{NAME}-{role}"}, "status": status}

    done = role_job("worker", {"conditions": [cond("Complete")], "succeeded": 2})
    failing = role_job("chief", {"conditions": [cond("FailureTarget")], "failed": 1})
    ps = role_job("ps", {"active": 2})
    assert native.leftovers([done, failing, ps]) == [f"{NAME}-ps"]
    assert get_backend("kubeflow").leftovers([ps]) == []  # the operator's controller cleans up
    stopped = role_job("ps", {"active": 2})
    stopped["metadata"]["annotations"] = native.settle_patch()["metadata"]["annotations"]
    assert native.leftovers([done, stopped]) == []  # already being stopped


def test_native_jobs_the_runner_stopped_do_not_change_the_jobs_outcome():
    def role_job(role, status, settled=False):
        meta = {"name": f"{NAME}-{role}", "labels": {"dlc-airflow/role": role}}
        if settled:
            meta["annotations"] = native.settle_patch()["metadata"]["annotations"]
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"completions": 1}, "status": status}

    deadline = {"conditions": [cond("Failed", reason="DeadlineExceeded")], "failed": 1}
    # parameter servers stopped after the chief and workers completed: still a success
    ok = native.status([role_job("chief", {"conditions": [cond("Complete")], "succeeded": 1}),
                        role_job("ps", deadline, settled=True)])
    assert (ok.state, ok.restarts) == (JobState.SUCCEEDED, 0)
    # the master stopped after the worker failed: the worker's failure is the job's
    failed = native.status([role_job("master", deadline, settled=True),
                            role_job("worker", {"conditions": [cond("Failed", reason="PodFailurePolicy",
                                                                    message="exit code 3")], "failed": 1})])
    assert (failed.state, failed.reason, failed.message) == (JobState.FAILED, "PodFailurePolicy",
                                                             "worker: exit code 3")


# -- one reason for a job that used up its restarts, whatever the backend ------------------------


def test_exhausted_restarts_have_the_same_reason_on_every_backend():
    """Each backend's controller words it its own way (kept in the message); the reason is ours."""
    ft = {"max_restarts": 2}
    pytorch = DLCJob(type="pytorch", image="img", command=["x"], roles={"worker": 2}, fault_tolerance=ft)
    exhausted = {}

    # native: backoffLimitPerIndex used up by index 1, maxFailedIndexes 0
    worker = next(o for o in native.render(pytorch, NAME) if o["kind"] == "Job")
    worker["status"] = {"conditions": [cond("FailureTarget", "MaxFailedIndexesExceeded", "", T2),
                                       cond("Failed", "MaxFailedIndexesExceeded", "", T3)],
                        "startTime": T1, "failed": 3, "failedIndexes": "1"}
    exhausted["native"] = native.status([worker])

    # jobset: failurePolicy.maxRestarts used up
    js = jobset.render(pytorch, NAME)[0]
    js["status"] = {"restarts": 2, "conditions": [cond("Failed", "ReachedMaxRestarts",
                                                       "jobset failed due to reaching max number of restarts", T3)]}
    exhausted["jobset"] = jobset.status([js])

    # kubeflow: runPolicy.backoffLimit used up (restartPolicy OnFailure)
    ptj = kubeflow.render(pytorch, NAME)[0]
    ptj["status"] = {"conditions": [cond("Failed", "PyTorchJobFailed",
                                         f"Job {NAME} has failed because it has reached the specified backoff limit", T3)],
                     "replicaStatuses": {"Worker": {"failed": 3}}}
    exhausted["kubeflow"] = kubeflow.status([ptj])

    # trainer: TrainJob v1alpha1 has no restart limit of its own; the runtime's JobSet fails
    # once a child Job ran out of retries (conditions copied from the JobSet)
    tj = trainer.render(DLCJob(type="pytorch", image="img", command=["x"], roles={"worker": 2}), NAME)[0]
    tj["status"] = {"conditions": [cond("Failed", "FailedJobs", "jobset failed due to one or more job failures", T3)],
                    "jobsStatus": [rjs("node", failed=1)]}
    exhausted["trainer"] = trainer.status([tj])

    # ray: KubeRay stops retrying once status.failed reaches backoffLimit + 1
    rj = ray.render(DLCJob(type="ray", image="img", command=["x"], fault_tolerance=ft), NAME)[0]
    rj["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed", "failed": 3,
                    "message": "Job entrypoint command failed with exit code 1", "endTime": T3}
    exhausted["ray"] = ray.status([rj])

    from dlc_airflow.k8s.backends import BACKENDS

    assert set(exhausted) == set(BACKENDS)  # a new backend must say how it reports this
    assert {b: (s.state, s.reason) for b, s in exhausted.items()} == \
        {b: (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED) for b in exhausted}
    assert all(s.message for s in exhausted.values())  # the controller's own words stay



@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName"])
def test_native_containers_that_cannot_start_make_the_job_queued_cannot_start(reason):
    """The kubelet retries these for ever; the waiting side fails the job after queue_timeout
    (or the default for jobs that cannot start) with the kubelet's message."""
    from dlc_airflow import reasons

    job = batch_job("worker", 2, {"active": 2, "startTime": T1})
    waiting = pod(f"{NAME}-worker-0", "worker", phase="Pending")
    waiting["spec"] = {"nodeName": "cpu-0"}
    waiting["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {
        "reason": reason, "message": 'Back-off pulling image "registry.local/nope:1"'}}}]
    s = native.status([job], [waiting, pod(f"{NAME}-worker-1", "worker")])
    assert s.state is JobState.QUEUED and s.reason == reasons.CANNOT_START
    assert s.message == f'pod {NAME}-worker-0 container main: {reason}: Back-off pulling image "registry.local/nope:1"'


def test_a_job_dlc_airflow_stopped_reads_stopped_unless_it_had_ended_on_its_own():
    from dlc_airflow.k8s.backends.base import stop_annotations, stopped_by_us

    def job(status):
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": NAME}, "status": status}

    running = job({"active": 1})
    marked = {**running, "metadata": {**running["metadata"], **stop_annotations()["metadata"]}}
    assert stopped_by_us([running], JobStatus(state=JobState.RUNNING)).state is JobState.RUNNING
    stopped = stopped_by_us([marked], JobStatus(state=JobState.RUNNING, roles={"worker": RoleCounts(active=1)}))
    assert (stopped.state, stopped.reason, stopped.roles["worker"].active) == (JobState.STOPPED, "Stopped", 0)
    # the deadline the stop set is the stop's; a job that succeeded or failed first keeps its end
    assert stopped_by_us([marked], JobStatus(state=JobState.FAILED, reason="DeadlineExceeded")).state is JobState.STOPPED
    assert stopped_by_us([marked], JobStatus(state=JobState.SUCCEEDED)).state is JobState.SUCCEEDED
    failed = JobStatus(state=JobState.FAILED, reason="PodFailurePolicy")
    assert stopped_by_us([marked], failed) == failed
