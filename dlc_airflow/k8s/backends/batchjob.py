"""batch/v1 pieces the Job-based backends share (native, JobSet, and Kubeflow's hostfile).

- `JOB_TYPES`: the job types that run as plain batch/v1 Indexed Jobs with our wiring;
- `job_addressing`: `<name>-<role>-<i>.<name>` (Indexed Job pods behind a headless Service);
- `hostfile_config_map`: the ConfigMap `<name>-hostfile` and its volume + mount, for the jobs
  `spec.hostfile_spec` says have a hostfile (path and slots come from there too);
  `launcher_files`: that ConfigMap and the job's SSH keys (sshkeys), on native and JobSet;
- `role_job_spec` / `pod_failure_rules`: a role's JobSpec (Indexed, podFailurePolicy, limits);
- `jobs_status` / `replaced_failures`: the JobStatus of role Jobs (and their pods).

Nothing here talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc_airflow import naming, reasons, wiring
from dlc_airflow.jobtypes import JobType
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    condition_time,
    deadline_seconds,
    earliest,
    latest,
    ttl_seconds,
)
from dlc_airflow.k8s.backends.podspec import COMPLETION_INDEX_ANNOTATION, Volumes
from dlc_airflow.k8s.backends.sshkeys import ssh_keys
from dlc_airflow.spec import DLCJob, hostfile_spec
from dlc_airflow.status import JobState, JobStatus, RoleCounts, condition

# Every type but ray (a Ray cluster needs the KubeRay operator) and slurm (a batch script
# needs a Slurm cluster: backend="slurm").
JOB_TYPES = frozenset(JobType) - {JobType.ray, JobType.slurm}
NO_RAY = "a Ray cluster needs the KubeRay operator"

# on a role Job stopped by the runner after the job as a whole had finished
SETTLED_ANNOTATION = naming.PREFIX + "settled"

# Port for peers when the job type has no rendezvous port (MPI, batch, custom).
DEFAULT_PORT = 29500
MAIN_CONTAINER = "main"
HOSTFILE_KEY = "hostfile"
# Roles that serve until killed; they do not count towards success.
SERVER_ROLES = frozenset({"ps"})
# Roles no other job type has.
TF_ONLY_ROLES = frozenset({"chief", "ps", "evaluator"})

# batch/v1 Job failure reasons -> ours (reasons.py); others are kept as the controller wrote them.
FAILURE_REASONS = {
    # a replica ran out of restarts: backoffLimit, or backoffLimitPerIndex with maxFailedIndexes 0
    "BackoffLimitExceeded": reasons.RESTART_LIMIT_EXCEEDED,
    "MaxFailedIndexesExceeded": reasons.RESTART_LIMIT_EXCEEDED,
    "FailedIndexes": reasons.RESTART_LIMIT_EXCEEDED,
    "PodFailurePolicy": reasons.NON_RETRYABLE_EXIT,  # our FailJob rule
    "DeadlineExceeded": reasons.DEADLINE_EXCEEDED,
}


def job_addressing(name: str, job: DLCJob, host: str = "{name}-{role}-{i}.{name}") -> wiring.Addressing:
    """Peers of an Indexed Job: `host` formatted with the job name, role and index."""
    port = wiring.rendezvous_port(job) or DEFAULT_PORT
    return wiring.Addressing(host=lambda role, i: host.format(name=name, role=role, i=i), port=lambda role, i: port)


def hostfile_config_map(
    job: DLCJob, name: str, addr: wiring.Addressing, labels: Manifest, annotations: Manifest
) -> tuple[Manifest, Volumes] | None:
    """The hostfile ConfigMap `<name>-hostfile`, and its volume + mount (one file, subPath)."""
    spec = hostfile_spec(job)
    if spec is None:
        return None
    cm_name = naming.child_name(name, "hostfile")
    metadata: Manifest = {"name": cm_name, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {HOSTFILE_KEY: wiring.hostfile(job, addr, spec.slots)},
    }
    volume = {"name": "hostfile", "configMap": {"name": cm_name}}
    mount = {"name": "hostfile", "mountPath": spec.path, "subPath": HOSTFILE_KEY, "readOnly": True}
    return cm, Volumes([volume], [mount])


def launcher_files(
    job: DLCJob, name: str, addr: wiring.Addressing, labels: Manifest, annotations: Manifest
) -> tuple[list[Manifest], Volumes | None]:
    """The hostfile ConfigMap and the SSH key Secret of a job launched over MPI, and their
    volumes + mounts; ([], None) for the other jobs."""
    hostfile, keys = hostfile_config_map(job, name, addr, labels, annotations), ssh_keys(job, name, labels, annotations)
    if hostfile is None or keys is None:
        return [], None
    (config_map, files), (secret, key_files) = hostfile, keys
    return [config_map, secret], Volumes(files.volumes + key_files.volumes, files.mounts + key_files.mounts)


def pod_failure_rules(job: DLCJob, container: str) -> list[Manifest]:
    """podFailurePolicy rules; order matters (the first matching rule decides)."""
    ft = job.fault_tolerance
    rules: list[Manifest] = []
    if ft.restart_on_preemption:
        rules.append({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    if ft.retryable_exit_codes:
        rules.append(
            {
                "action": "FailJob",
                # Only the main container: a failed clone or health check is retried as usual.
                "onExitCodes": {
                    "containerName": container,
                    "operator": "NotIn",
                    "values": sorted(set(ft.retryable_exit_codes)),
                },
            }
        )
    return rules


def role_job_spec(
    job: DLCJob,
    role: str,
    template: Manifest,
    *,
    per_index_restarts: bool = True,
    ttl: bool = True,
    suspend: bool = True,
) -> Manifest:
    """The batch/v1 JobSpec of one role (native uses all of it; JobSet drops some parts)."""
    replicas = job.roles[role].replicas
    spec: Manifest = {
        "completionMode": "Indexed",
        "completions": replicas,
        "parallelism": replicas,
    }
    if per_index_restarts:
        spec["backoffLimitPerIndex"] = job.fault_tolerance.max_restarts
        spec["maxFailedIndexes"] = 0
    else:
        spec["backoffLimit"] = 0
    if rules := pod_failure_rules(job, MAIN_CONTAINER):
        spec["podFailurePolicy"] = {"rules": rules}
    if (deadline := deadline_seconds(job)) is not None:
        spec["activeDeadlineSeconds"] = deadline
    if ttl and (seconds := ttl_seconds(job)) is not None:
        spec["ttlSecondsAfterFinished"] = seconds
    if suspend and job.scheduling.queue:
        spec["suspend"] = True
    spec["template"] = template
    return spec


# -- status -----------------------------------------------------------------------------------


def replaced_failures(pods: Sequence[Pod]) -> int:
    """Failed pods that got a successor for the same replica (preempted ones not counted)."""
    by_replica: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        key = ((meta.get("labels") or {}).get(naming.LABEL_ROLE, ""),
               (meta.get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION, meta.get("name", "")))
        by_replica.setdefault(key, []).append(pod)
    count = 0
    for replica in by_replica.values():
        replica.sort(key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                    (p.get("metadata") or {}).get("name", "")))
        for pod in replica[:-1]:
            status = pod.get("status") or {}
            disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
            count += status.get("phase") == "Failed" and not disrupted
    return count


def _index_count(intervals: str) -> int:
    """How many indexes an interval list such as '0,2-4' names."""
    count = 0
    for part in filter(None, (intervals or "").split(",")):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def _role_of(obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    role = (meta.get("labels") or {}).get(naming.LABEL_ROLE)
    if role:
        return str(role)
    name, job_name = str(meta.get("name", "")), str((meta.get("labels") or {}).get(naming.LABEL_JOB, ""))
    return name[len(job_name) + 1 :] if job_name and name.startswith(job_name + "-") else name


def _failed_condition(obj: Manifest) -> Manifest | None:
    return condition(obj, "Failed") or condition(obj, "FailureTarget")


def settled(obj: Manifest) -> bool:
    """Whether the runner stopped this role Job after the job had finished (settle_patch)."""
    return SETTLED_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})


def _complete(obj: Manifest) -> bool:
    return bool(condition(obj, "Complete") or condition(obj, "SuccessCriteriaMet"))


def _template_env(obj: Manifest, name: str) -> str | None:
    """The value of env `name` in the Job's pod template (the wiring sets DLC_JOB_TYPE in each)."""
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        for var in container.get("env") or []:
            if var.get("name") == name and "value" in var:
                return str(var["value"])
    return None


def _has_index(intervals: str, index: int) -> bool:
    """Whether an interval list such as '0,2-4' names `index`."""
    for part in filter(None, (intervals or "").split(",")):
        low, _, high = part.partition("-")
        if int(low) <= index <= int(high or low):
            return True
    return False


def decider(jobs: list[Manifest]) -> Manifest | None:
    """The role Job whose end decides the job's, as Kubeflow's operators have it: TensorFlow's
    chief, else its workers (their index 0 decides: TFJob); MPI's launcher, whose workers
    serve (sshd) until stopped (MPIJob). None for the other types: every role Job must complete.

    The type is the pod templates' DLC_JOB_TYPE; without one, roles only TensorFlow has tell."""
    by_role = {_role_of(o): o for o in jobs}
    kind = next((t for t in (_template_env(o, "DLC_JOB_TYPE") for o in jobs) if t), None)
    if kind == JobType.mpi.value:
        return by_role.get("launcher")
    tensorflow = kind == JobType.tensorflow.value if kind else bool(TF_ONLY_ROLES & set(by_role))
    return (by_role.get("chief") or by_role.get("worker")) if tensorflow else None


def _decided(lead: Manifest) -> bool:
    """The chief's Job completed, or index 0 of the workers' Job did."""
    if _complete(lead):
        return True
    completed = (lead.get("status") or {}).get("completedIndexes") or ""
    return _role_of(lead) == "worker" and _has_index(completed, 0)


def jobs_status(jobs: list[Manifest]) -> JobStatus:
    """Aggregate batch/v1 Jobs (one per role) into one JobStatus."""
    roles: dict[str, RoleCounts] = {}
    failed_pods = 0
    for obj in sorted(jobs, key=_role_of):
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        role = _role_of(obj)
        c = roles.setdefault(role, RoleCounts())
        c.replicas += int(spec.get("completions") or spec.get("parallelism") or 1)
        c.active += int(st.get("active") or 0)
        c.succeeded += int(st.get("succeeded") or 0)
        c.failed += int(st.get("failed") or 0)
        if not settled(obj):  # the pods the runner stopped are not failures of the job
            failed_pods += int(st.get("failed") or 0)

    created = earliest((o.get("metadata") or {}).get("creationTimestamp") for o in jobs)
    started = earliest((o.get("status") or {}).get("startTime") for o in jobs)
    base: JSONObject = {"roles": roles, "created": created, "started": started}

    # TensorFlow: the job succeeds when the chief does (worker 0 without a chief), whatever the
    # parameter servers, evaluators and other workers do; MPI: when the launcher does. The
    # runner then settles the others. Before the failures: a worker that fails once the lead is
    # done does not undo the success, and a failure before it ends the lead's Job too (settle,
    # or maxFailedIndexes for worker 0).
    lead = decider(jobs)
    if lead is not None and _decided(lead):
        st = lead.get("status") or {}
        finished = latest([st.get("completionTime") or condition_time(lead, "Complete")
                           or condition_time(lead, "SuccessCriteriaMet")])
        return JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED, finished=finished,
                         restarts=failed_pods, **base)

    for obj in jobs:
        cond = None if settled(obj) else _failed_condition(obj)
        if cond:
            message = cond.get("message") or ""
            role = _role_of(obj)
            reason = cond.get("reason") or "Failed"
            # Without pods: the failed pods of an index that ran out of restarts, but its last
            # one, were restarts (a FailJob rule or the deadline ends the job without any).
            final = sum(_index_count((o.get("status") or {}).get("failedIndexes") or "") for o in jobs)
            return JobStatus(
                state=JobState.FAILED,
                reason=FAILURE_REASONS.get(reason, reason),
                message=f"{role}: {message}" if message else f"{role} failed",
                finished=latest([condition_time(obj, "Failed") or cond.get("lastTransitionTime")]),
                restarts=max(0, failed_pods - final) if final else 0,
                **base,
            )

    if lead is None and all(_complete(o) for o in jobs):
        # SuccessCriteriaMet comes first; completionTime and Complete once the pods are gone.
        finished = latest(
            (o.get("status") or {}).get("completionTime") or condition_time(o, "Complete")
            or condition_time(o, "SuccessCriteriaMet") for o in jobs
        )
        # Every failed pod of a job that succeeded was replaced.
        return JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED, finished=finished,
                         restarts=failed_pods, **base)

    # spec.suspend covers the moment before the controller has written the condition.
    suspended = [o for o in jobs if condition(o, "Suspended") or (o.get("spec") or {}).get("suspend")]
    if suspended:
        cond = condition(suspended[0], "Suspended") or {}
        roles_waiting = ", ".join(_role_of(o) for o in suspended)
        message = cond.get("message") or f"suspended: {roles_waiting} (waiting for admission, e.g. Kueue)"
        return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED, message=message, **base)

    def count(key: str) -> int:
        return sum(int((o.get("status") or {}).get(key) or 0) for o in jobs)

    has_ready = all("ready" in (o.get("status") or {}) for o in jobs)
    # A pod counts as running once Ready (init containers done); clusters that do not report
    # `ready` fall back to `active`, which includes pending pods.
    running = count("ready") > 0 if has_ready else count("active") > 0
    running = running or count("succeeded") > 0
    expected = sum(c.replicas for c in roles.values())
    up = count("ready") if has_ready else count("active")
    if failed_pods and up + count("succeeded") < expected:
        return JobStatus(
            state=JobState.RESTARTING,
            reason=reasons.RESTARTING,
            message=f"{failed_pods} failed pod(s); replacements pending",
            restarts=failed_pods,
            **base,
        )
    if running:
        return JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING, restarts=failed_pods, **base)
    return JobStatus(state=JobState.PENDING, reason=reasons.CREATED, restarts=failed_pods, **base)
