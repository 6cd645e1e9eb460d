"""The ray backend: a KubeRay RayJob (ray.io/v1) for jobs of type ray.

The RayJob brings up a RayCluster from `rayClusterSpec` (a head group from the head role and
one worker group "worker" from the worker role, fixed size: replicas = min = max), submits
the job's command as the Ray entrypoint from a submitter Kubernetes Job (K8sJobMode), and
deletes the cluster when the job finishes (shutdownAfterJobFinishes, after
ttlSecondsAfterFinished). activeDeadlineSeconds = max_running_time; backoffLimit =
max_restarts (each retry makes a new cluster); suspend with Kueue.

The entrypoint is the head role's command: `shlex.join(command)`, or the shell string as
given. KubeRay writes the head and worker containers' command (`ray start ...`), so the pods
carry our env, resources, volumes and placement but no command, and roles.worker.command
is refused. KubeRay sets RAY_ADDRESS in the pods itself (the head Service name is generated),
so the framework wiring is not added; pods have no replica index (DLC_ROLE_INDEX unset).
The submitter pod (role "submitter") is KubeRay's default one with our labels, annotations and
the head's placement: its log is the entrypoint's output.

A RayJob left Failed with reason AppFailed has used up its retries (KubeRay retries until
status.failed reaches backoffLimit + 1): RestartLimitExceeded (reasons.py), KubeRay's message kept.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from dlc_airflow import naming, reasons
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    Backend,
    ResourceKind,
    apply_pods,
    deadline_seconds,
    earliest,
    latest,
    not_found,
    object_annotations,
    object_labels,
    pod_role_counts,
    queue_labels,
    ttl_seconds,
)
from dlc_airflow.k8s.backends.podspec import pod_role_env, pod_template
from dlc_airflow.k8s.kinds import RAY_JOB
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts

HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
WORKER_GROUP = "worker"
HEAD_START_PARAMS = {"dashboard-host": "0.0.0.0"}


def entrypoint(job: DLCJob) -> str:
    head = job.roles["head"]
    if head.command:
        return shlex.join(head.command)
    if head.shell:
        return head.shell
    if job.command:
        return shlex.join(job.command)
    return job.shell or ""


SUBMITTER_ROLE = "submitter"
SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's name for it
SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
SUBMITTER_PLACEMENT = ("serviceAccountName", "nodeSelector", "tolerations", "affinity", "priorityClassName",
                       "imagePullSecrets")


class RayBackend(Backend):
    name = "ray"
    job_types = frozenset({JobType.ray})
    refusal = "a KubeRay RayJob runs type 'ray' only"

    def check_options(self, job: DLCJob) -> None:
        worker = job.roles.get("worker")
        if worker and (worker.command or worker.shell):
            raise BackendError(
                "ray backend: roles.worker.command is not used (KubeRay starts Ray workers itself); "
                "put the program in the job's (or the head's) command, the Ray entrypoint"
            )

    def kind(self, job: DLCJob) -> ResourceKind:
        return RAY_JOB

    def _template(self, job: DLCJob, name: str, role: str, identity: naming.TaskIdentity | None,
                  attempt: int | None, annotations: dict[str, str], container: str) -> Manifest:
        return pod_template(
            job,
            role,
            pod_role_env(job, name, role, None, framework=False),
            labels=object_labels(job, name, identity, attempt, role),
            annotations=annotations,
            container_name=container,
            index=None,
            restart_policy=None,  # KubeRay manages the Ray pods
            run_command=False,
        )

    def _submitter(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int | None,
                   annotations: dict[str, str], head: Manifest) -> Manifest:
        """KubeRay's default submitter pod (the head's image, its requests), with our labels and
        annotations and the head's placement: the pod where the entrypoint's result and output
        are, so it is found, logged and placed like the job's other pods. KubeRay writes its
        command (`ray job submit ...`)."""
        metadata: Manifest = {"labels": object_labels(job, name, identity, attempt, SUBMITTER_ROLE)}
        if annotations:
            metadata["annotations"] = annotations
        placement = {k: v for k, v in head["spec"].items() if k in SUBMITTER_PLACEMENT}
        image = head["spec"]["containers"][0]["image"]
        container = {"name": SUBMITTER_CONTAINER, "image": image, "resources": dict(SUBMITTER_RESOURCES)}
        return {"metadata": metadata, "spec": {**placement, "restartPolicy": "Never", "containers": [container]}}

    def _render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None,
                attempt: int | None) -> list[Manifest]:
        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        cluster: Manifest = {
            "headGroupSpec": {
                "rayStartParams": dict(HEAD_START_PARAMS),
                "template": self._template(job, name, "head", identity, attempt, annotations, HEAD_CONTAINER),
            }
        }
        if worker := job.roles.get("worker"):
            cluster["workerGroupSpecs"] = [
                {
                    "groupName": WORKER_GROUP,
                    "replicas": worker.replicas,
                    "minReplicas": worker.replicas,
                    "maxReplicas": worker.replicas,
                    "rayStartParams": {},
                    "template": self._template(job, name, "worker", identity, attempt, annotations, WORKER_CONTAINER),
                }
            ]
        spec: Manifest = {
            "entrypoint": entrypoint(job),
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": ttl_seconds(job) or 0,
            "backoffLimit": job.fault_tolerance.max_restarts,
            "rayClusterSpec": cluster,
            "submitterPodTemplate": self._submitter(
                job, name, identity, attempt, annotations, cluster["headGroupSpec"]["template"]
            ),
        }
        if (deadline := deadline_seconds(job)) is not None:
            spec["activeDeadlineSeconds"] = deadline
        if job.scheduling.queue:
            spec["suspend"] = True  # allowed: shutdownAfterJobFinishes is true
        metadata: Manifest = {"name": name, "labels": {**labels, **queue_labels(job)}}
        if annotations:
            metadata["annotations"] = annotations
        return [{"apiVersion": RAY_JOB.api_version, "kind": "RayJob", "metadata": metadata, "spec": spec}]

    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        if not objects:
            return not_found()
        return apply_pods(rayjob_status(objects[0], pods), pods)


def rayjob_status(obj: Manifest, pods: Sequence[Pod] | None = None) -> JobStatus:
    """RayJob: status.jobDeploymentStatus (KubeRay's lifecycle) + status.jobStatus (Ray's)."""
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    deployment = st.get("jobDeploymentStatus") or ""
    job_status = st.get("jobStatus") or ""
    reason, message = st.get("reason") or "", st.get("message") or ""

    cluster = (spec.get("rayClusterSpec") or {})
    workers = sum(int(g.get("replicas") or 0) for g in cluster.get("workerGroupSpecs") or [])
    roles = {"head": RoleCounts(replicas=1), SUBMITTER_ROLE: RoleCounts(replicas=1)}
    if workers:
        roles["worker"] = RoleCounts(replicas=workers)
    cstatus = st.get("rayClusterStatus") or {}
    if "readyWorkerReplicas" in cstatus and "worker" in roles:
        roles["worker"].active = int(cstatus.get("readyWorkerReplicas") or 0)
    for role, counts in pod_role_counts(pods).items():
        roles[role] = counts.model_copy(update={"replicas": roles.get(role, RoleCounts()).replicas})

    meta = obj.get("metadata") or {}
    failed = int(st.get("failed") or 0)
    base: JSONObject = {
        "roles": roles,
        # KubeRay counts every failed run in status.failed, the final one of a failed job too.
        "restarts": max(0, failed - 1) if deployment in ("Failed", "ValidationFailed") else failed,
        "created": earliest([meta.get("creationTimestamp")]),
        "started": earliest([st.get("startTime")]),
    }
    finished = latest([st.get("endTime")])

    if deployment == "Complete":
        if job_status == "SUCCEEDED":
            return JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED, message=message, finished=finished, **base)
        if job_status == "STOPPED":
            return JobStatus(state=JobState.STOPPED, reason=reasons.STOPPED, message=message or "the Ray job was stopped", finished=finished, **base)
        return JobStatus(state=JobState.FAILED, reason=failure_reason(reason or "AppFailed"),
                         message=message or f"Ray job status {job_status or 'unknown'}", finished=finished, **base)
    if deployment in ("Failed", "ValidationFailed"):
        return JobStatus(state=JobState.FAILED, reason=failure_reason(reason or deployment), message=message,
                         finished=finished, **base)
    if job_status in ("FAILED",) and deployment not in ("Retrying", "Running"):
        return JobStatus(state=JobState.FAILED, reason=failure_reason(reason or "AppFailed"), message=message,
                         finished=finished, **base)
    if deployment in ("Suspended", "Suspending") or (spec.get("suspend") and deployment in ("", "New")):
        return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED,
                         message=message or "suspended (waiting for admission, e.g. Kueue)", **base)
    if deployment == "Retrying":
        return JobStatus(state=JobState.RESTARTING, reason="Retrying", message=message,
                         **{**base, "restarts": max(1, base["restarts"])})
    if deployment == "Running" and job_status == "RUNNING":
        return JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING, message=message, **base)
    if deployment == "Running" and job_status in RAY_TERMINAL:
        # Ray's verdict is in, but KubeRay waits for the submitter pod to end (it retries a
        # failed one) before it decides: still running, not pending
        return JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING,
                         message=f"the Ray job {job_status}; KubeRay waits for the submitter to finish", **base)
    if deployment == "Running":
        return JobStatus(state=JobState.PENDING, reason=f"Ray job {job_status or 'PENDING'}", message=message, **base)
    return JobStatus(state=JobState.PENDING, reason=deployment or reasons.CREATED, message=message, **base)


RAY_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")  # Ray's final job states

# KubeRay's failure reasons -> ours; the others (SubmissionFailed, ValidationFailed...) are kept.
RAY_FAILURE_REASONS = {
    # KubeRay retries a failed run (Retrying) until status.failed reaches backoffLimit + 1: a
    # RayJob left Failed with AppFailed has used up its restarts (max_restarts).
    "AppFailed": reasons.RESTART_LIMIT_EXCEEDED,
    "DeadlineExceeded": reasons.DEADLINE_EXCEEDED,
}


def failure_reason(reason: str) -> str:
    return RAY_FAILURE_REASONS.get(reason, reason)
