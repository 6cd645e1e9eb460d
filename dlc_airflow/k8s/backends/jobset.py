"""The jobset backend: one JobSet (jobset.x-k8s.io/v1alpha2) with a replicatedJob per role.

Each role is a replicatedJob named after it (replicas 1) whose Job template is the native
role Job's spec, so pods resolve as `<name>-<role>-0-<i>.<name>` (JobSet names the Job
`<name>-<role>-0` and runs its own headless Service `<name>`: network.enableDNSHostnames,
subdomain <name>). Every type the native backend supports runs here too.

Fault tolerance is JobSet's: a failed replica restarts the whole set (all roles recreated,
what a distributed job needs after losing a rank), up to `failurePolicy.maxRestarts =
fault_tolerance.max_restarts`. The child Jobs have `backoffLimit: 0` and keep the native
podFailurePolicy (preempted pods are replaced without a restart; a non-retryable exit code
fails the child Job with reason PodFailurePolicy). A failurePolicy rule turns child failures
with reason PodFailurePolicy or DeadlineExceeded into FailJobSet: no restart for permanent
errors or for running out of time. activeDeadlineSeconds is per child Job (a restart starts a
new deadline); ttlSecondsAfterFinished and suspend (Kueue) are set on the JobSet.

successPolicy: All over every role; TensorFlow's chief alone decides (its workers without a
chief), as in TFJob: parameter servers and evaluators never exit; MPI's launcher alone, as in
MPIJob: its workers serve sshd until stopped.
MPI hostfiles: a ConfigMap `<name>-hostfile`, and the job's SSH keys, a Secret `<name>-ssh`
(sshkeys.py), both owned by the JobSet.

Failure reasons: ReachedMaxRestarts (failurePolicy.maxRestarts used up) is RestartLimitExceeded
(reasons.py); our FailJobSet rule's reason is kept (the child Job's reason is not in the JobSet's
status); the controller's message is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc_airflow import naming, reasons, wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    CONFIG_MAP,
    Backend,
    ResourceKind,
    apply_pods,
    condition_time,
    earliest,
    latest,
    not_found,
    object_annotations,
    object_labels,
    pod_failure,
    pod_role_counts,
    queue_labels,
    ttl_seconds,
)
from dlc_airflow.k8s.backends.batchjob import (
    JOB_TYPES,
    MAIN_CONTAINER,
    NO_RAY,
    SERVER_ROLES,
    job_addressing,
    launcher_files,
    role_job_spec,
)
from dlc_airflow.k8s.backends.podspec import JOB_INDEX, pod_role_env, pod_template
from dlc_airflow.k8s.backends.sshkeys import setup_lines
from dlc_airflow.k8s.kinds import JOBSET
from dlc_airflow.spec import DLCJob, hostfile_spec
from dlc_airflow.status import JobState, JobStatus, RoleCounts, condition

# JobSet's webhook checks `<name>-<role>-<jobindex>-<podindex>-abcde` (a 5-character pod name
# suffix) against the 63-character DNS label limit.
_POD_SUFFIX = len("-abcde")
PERMANENT_FAILURE_REASONS = [reasons.NON_RETRYABLE_EXIT, reasons.DEADLINE_EXCEEDED]  # child Job reasons

# JobSet (and TrainJob, which copies its JobSet's conditions) failure reasons -> ours;
# FailJobSetFailurePolicyAction (our FailOnPermanentError rule) is told apart by the pods.
FAIL_JOBSET_ACTION = "FailJobSetFailurePolicyAction"
JOBSET_FAILURE_REASONS = {
    "ReachedMaxRestarts": reasons.RESTART_LIMIT_EXCEEDED,  # failurePolicy.maxRestarts used up
    "FailedJobs": reasons.RESTART_LIMIT_EXCEEDED,  # no failurePolicy: a child Job ran out of retries
    "DeadlineExceeded": reasons.DEADLINE_EXCEEDED,
}


def jobset_addressing(name: str, job: DLCJob) -> wiring.Addressing:
    return job_addressing(name, job, host="{name}-{role}-0-{i}.{name}")


class JobSetBackend(Backend):
    name = "jobset"
    job_types = JOB_TYPES  # every type the native backend runs
    refusal = NO_RAY

    def kind(self, job: DLCJob) -> ResourceKind:
        return JOBSET

    def kinds(self, job: DLCJob) -> list[ResourceKind]:
        return [JOBSET, CONFIG_MAP] if hostfile_spec(job) else [JOBSET]

    def _render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None,
                attempt: int | None) -> list[Manifest]:
        for role, role_spec in job.roles.items():
            pod = f"{name}-{role}-0-{role_spec.replicas - 1}"
            if len(pod) + _POD_SUFFIX > naming.MAX_NAME:
                raise BackendError(
                    f"jobset backend: pod names such as {pod}-xxxxx exceed 63 characters; "
                    f"shorten the job name or role {role!r}, or use backend='native'"
                )
        addr = jobset_addressing(name, job)
        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        files, extra = launcher_files(job, name, addr, labels, annotations)
        lead = wiring.coordinator(job)

        replicated = []
        for role in ordered_roles(job.roles):
            role_labels = object_labels(job, name, identity, attempt, role)
            template = pod_template(
                job,
                role,
                pod_role_env(job, name, role, addr),
                labels=role_labels,
                annotations=annotations,
                container_name=MAIN_CONTAINER,
                index=JOB_INDEX,
                subdomain=None,  # JobSet sets the pods' subdomain to network.subdomain
                extra=extra,
                setup=setup_lines(job, role, lead),
            )
            job_meta: Manifest = {"labels": role_labels}
            if annotations:
                job_meta["annotations"] = annotations
            replicated.append(
                {
                    "name": role,
                    "replicas": 1,
                    "template": {
                        "metadata": job_meta,
                        "spec": role_job_spec(
                            job, role, template, per_index_restarts=False, ttl=False, suspend=False
                        ),
                    },
                }
            )

        spec: Manifest = {
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "replicatedJobs": replicated,
            "successPolicy": {"operator": "All"},
            "failurePolicy": {
                "maxRestarts": job.fault_tolerance.max_restarts,
                "rules": [
                    {
                        "name": "FailOnPermanentError",
                        "action": "FailJobSet",
                        "onJobFailureReasons": list(PERMANENT_FAILURE_REASONS),
                    }
                ],
            },
        }
        if job.type is JobType.tensorflow:
            # TFJob's rule: the chief decides (the workers without a chief); parameter servers
            # and evaluators never count
            spec["successPolicy"]["targetReplicatedJobs"] = ["chief" if "chief" in job.roles else "worker"]
        elif job.type is JobType.mpi:
            # MPIJob's rule: the launcher decides; its workers serve (sshd) until stopped
            spec["successPolicy"]["targetReplicatedJobs"] = ["launcher"]
        elif servers := [r for r in job.roles if r in SERVER_ROLES]:
            spec["successPolicy"]["targetReplicatedJobs"] = [r for r in ordered_roles(job.roles) if r not in servers]
        if (ttl := ttl_seconds(job)) is not None:
            spec["ttlSecondsAfterFinished"] = ttl
        if job.scheduling.queue:
            spec["suspend"] = True
        metadata: Manifest = {"name": name, "labels": {**labels, **queue_labels(job)}}
        if annotations:
            metadata["annotations"] = annotations
        jobset = {"apiVersion": JOBSET.api_version, "kind": "JobSet", "metadata": metadata, "spec": spec}
        return [jobset, *files]

    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        if not objects:
            return not_found()
        return apply_pods(jobset_status(objects[0], pods), pods)


def jobset_status(obj: Manifest, pods: Sequence[Pod] | None = None) -> JobStatus:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    restarts = int(st.get("restarts") or 0)

    # Per role: replicas from the spec; counts from pods when given, else from the
    # replicatedJobsStatus (which counts Jobs: a Job stands for all its pods).
    roles: dict[str, RoleCounts] = {}
    for rj in spec.get("replicatedJobs") or []:
        job_spec = (rj.get("template") or {}).get("spec") or {}
        per_job = int(job_spec.get("completions") or job_spec.get("parallelism") or 1)
        roles[rj["name"]] = RoleCounts(replicas=per_job * int(rj.get("replicas") or 1))
    by_pods = pod_role_counts(pods)
    for rjs in st.get("replicatedJobsStatus") or []:
        c = roles.setdefault(rjs["name"], RoleCounts())
        if rjs["name"] in by_pods:
            continue
        if int(rjs.get("active") or 0):
            c.active = c.replicas
        if int(rjs.get("succeeded") or 0):
            c.succeeded = c.replicas
        if int(rjs.get("failed") or 0):
            c.failed = c.replicas
    for role, counts in by_pods.items():
        roles[role] = counts.model_copy(update={"replicas": roles.get(role, RoleCounts()).replicas})

    meta = obj.get("metadata") or {}
    base: JSONObject = {
        "roles": roles,
        "restarts": restarts,
        "created": earliest([meta.get("creationTimestamp")]),
        "started": earliest((p.get("status") or {}).get("startTime") for p in pods or []),
    }
    if cond := condition(obj, "Failed"):
        reason = cond.get("reason") or "Failed"
        ours = JOBSET_FAILURE_REASONS.get(reason, reason)
        if reason == FAIL_JOBSET_ACTION:
            # our FailOnPermanentError rule, on either child Job reason: a container that exited
            # with a code is the permanent error; none is the deadline (its pods were killed)
            exited = "exited with code" in pod_failure(pods)
            ours = reasons.NON_RETRYABLE_EXIT if exited else reasons.DEADLINE_EXCEEDED
        return JobStatus(
            state=JobState.FAILED,
            reason=ours,
            message=cond.get("message") or "",
            finished=latest([cond.get("lastTransitionTime")]),
            **base,
        )
    if cond := condition(obj, "Completed"):
        return JobStatus(
            state=JobState.SUCCEEDED,
            reason=reasons.COMPLETED,  # not JobSet's AllJobsCompleted
            message=cond.get("message") or "",
            finished=latest([condition_time(obj, "Completed")]),
            **base,
        )
    if (cond := condition(obj, "Suspended")) or spec.get("suspend"):
        message = (cond or {}).get("message") or "suspended (waiting for admission, e.g. Kueue)"
        return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED, message=message, **base)
    statuses = st.get("replicatedJobsStatus") or []
    if any(int(s.get("failed") or 0) for s in statuses) or (restarts and not any(int(s.get("ready") or 0) for s in statuses)):
        return JobStatus(state=JobState.RESTARTING, reason=reasons.RESTARTING, message=f"restart {restarts}", **base)
    if any(int(s.get("ready") or 0) or int(s.get("succeeded") or 0) for s in statuses):
        return JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING, **base)
    return JobStatus(state=JobState.PENDING, reason=reasons.CREATED, **base)
