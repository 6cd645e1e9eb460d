"""The native backend (default): batch/v1 Indexed Jobs and a headless Service, no CRDs.

Objects, in creation order:
1. the coordinator role's Job `<name>-<coordinator>` (the primary: the client makes it the
   owner of everything else, so deleting it deletes the job);
2. a headless Service `<name>` selecting every pod of the job, so that pods resolve as
   `<name>-<role>-<i>.<name>` (Indexed Job pods get hostname `<job>-<i>`; each pod template
   sets `subdomain: <name>`);
3. for MPI (and DeepSpeed/Megatron with launcher="mpi"), a ConfigMap `<name>-hostfile`
   mounted at the hostfile path in every pod;
4. the other roles' Jobs.

Each role Job: completionMode Indexed, completions = parallelism = replicas,
restartPolicy Never. Fault tolerance: `backoffLimitPerIndex = fault_tolerance.max_restarts`
(each replica is restarted up to that many times), `maxFailedIndexes = 0` (a replica that
runs out of restarts fails the job), and `podFailurePolicy` rules, first match wins:
  1. Ignore pods with condition DisruptionTarget (preemption, eviction, node drain) when
     `restart_on_preemption`: replaced without counting a restart;
  2. FailJob when the main container exits with a code NotIn `retryable_exit_codes` (when
     that list is set): no restart for a permanent error. The API wants the values sorted,
     unique, at most 255 (0 is only forbidden with In); the spec normalises them so.
`activeDeadlineSeconds` = max_running_time, `ttlSecondsAfterFinished` = ttl_after_finished
(on every role Job; when the primary goes, the garbage collector takes the rest with it).

Kueue: each Job carries `kueue.x-k8s.io/queue-name` and is created with `suspend: true`,
as Kueue's own samples do: Kueue's webhook would suspend it anyway, and creating it suspended
means nothing starts outside the quota if the webhook is briefly unavailable. Kueue admits
each role Job on its own (no all-or-nothing across roles): use the jobset backend for gang
admission of multi-role jobs.

TensorFlow parameter servers never exit: a job with a `ps` role succeeds when every other
role's Job is complete; the runner then stops the ps Jobs (`leftovers`), as it stops the
other roles' Jobs when one role's Job fails. It stops them without deleting them, since
deleting the primary would delete the whole job, the failed Job too: `stop_patch` gives the
Job a deadline already past, so the Job controller stops its pods and marks it Failed
(DeadlineExceeded; ttlSecondsAfterFinished then applies as to any finished Job), and an
annotation tells the status mapping that this failure is ours, not the job's.
"""

from __future__ import annotations

from dlc_airflow import naming, wiring
from dlc_airflow.backends.base import (
    CONFIG_MAP,
    JOB,
    SERVICE,
    Backend,
    ResourceKind,
    apply_pods,
    condition_time,
    deadline_seconds,
    earliest,
    latest,
    not_found,
    object_annotations,
    object_labels,
    queue_labels,
    ttl_seconds,
    unsupported_type,
)
from dlc_airflow.backends.podspec import COMPLETION_INDEX_ANNOTATION, JOB_INDEX, Volumes, pod_template
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts, condition

# on a role Job stopped by the runner after the job as a whole had finished
SETTLED_ANNOTATION = naming.PREFIX + "settled"

# Port for peers when the job type has no rendezvous port (MPI, batch, custom).
DEFAULT_PORT = 29500
MAIN_CONTAINER = "main"
HOSTFILE_KEY = "hostfile"
# Roles that serve until killed; they do not count towards success.
SERVER_ROLES = frozenset({"ps"})


def job_addressing(name: str, job: DLCJob) -> wiring.Addressing:
    port = wiring.rendezvous_port(job) or DEFAULT_PORT
    return wiring.Addressing(host=lambda role, i: f"{name}-{role}-{i}.{name}", port=lambda role, i: port)


def hostfile_path(job: DLCJob) -> tuple[str, int] | None:
    """(mount path, slots) of the job's hostfile, for types that launch over MPI."""
    if job.type is JobType.mpi:
        return wiring.MPI_HOSTFILE, job.slots_per_worker
    if job.type in (JobType.deepspeed, JobType.megatron) and job.launcher == "mpi":
        slots = job.slots_per_worker if "slots_per_worker" in job.model_fields_set else job.nproc_per_node
        return wiring.DEEPSPEED_HOSTFILE, slots
    return None


def hostfile_config_map(
    job: DLCJob, name: str, addr: wiring.Addressing, labels: dict, annotations: dict
) -> tuple[dict, Volumes] | None:
    """The hostfile ConfigMap `<name>-hostfile`, and its volume + mount (one file, subPath)."""
    found = hostfile_path(job)
    if found is None:
        return None
    path, slots = found
    cm_name = naming.child_name(name, "hostfile")
    metadata: dict = {"name": cm_name, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {HOSTFILE_KEY: wiring.hostfile(job, addr, slots)},
    }
    volume = {"name": "hostfile", "configMap": {"name": cm_name}}
    mount = {"name": "hostfile", "mountPath": path, "subPath": HOSTFILE_KEY, "readOnly": True}
    return cm, Volumes([volume], [mount])


def pod_failure_rules(job: DLCJob, container: str) -> list[dict]:
    """podFailurePolicy rules; order matters (the first matching rule decides)."""
    ft = job.fault_tolerance
    rules: list[dict] = []
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
    template: dict,
    *,
    per_index_restarts: bool = True,
    ttl: bool = True,
    suspend: bool = True,
) -> dict:
    """The batch/v1 JobSpec of one role (native uses all of it; JobSet drops some parts)."""
    replicas = job.roles[role].replicas
    spec: dict = {
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


class NativeBackend(Backend):
    """batch/v1 Indexed Jobs + headless Service: runs on any conformant cluster."""

    name = "native"

    def check(self, job: DLCJob) -> None:
        if job.type is JobType.ray:
            raise unsupported_type("ray", self.name, "a Ray cluster needs the KubeRay operator")

    def kind(self, job: DLCJob) -> ResourceKind:
        return JOB

    def kinds(self, job: DLCJob) -> list[ResourceKind]:
        kinds = [JOB, SERVICE]
        if hostfile_path(job):
            kinds.append(CONFIG_MAP)
        return kinds

    def main_container(self, job: DLCJob, role: str) -> str:
        return MAIN_CONTAINER

    def _render(self, job, name, identity, attempt):
        addr = job_addressing(name, job)
        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        extra = None
        config_maps = []
        if found := hostfile_config_map(job, name, addr, labels, annotations):
            config_maps, extra = [found[0]], found[1]

        lead = wiring.coordinator(job)
        roles = [lead] + [r for r in ordered_roles(job.roles) if r != lead]
        jobs = []
        for role in roles:
            role_labels = object_labels(job, name, identity, attempt, role)
            template = pod_template(
                job,
                role,
                wiring.role_env(job, name, role, addr),
                labels=role_labels,
                annotations=annotations,
                container_name=MAIN_CONTAINER,
                index=JOB_INDEX,
                subdomain=name,
                extra=extra,
            )
            metadata: dict = {"name": naming.child_name(name, role), "labels": {**role_labels, **queue_labels(job)}}
            if annotations:
                metadata["annotations"] = annotations
            jobs.append(
                {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": role_job_spec(job, role, template)}
            )
        return [jobs[0], self._service(job, name, labels, annotations), *config_maps, *jobs[1:]]

    @staticmethod
    def _service(job: DLCJob, name: str, labels: dict, annotations: dict) -> dict:
        spec: dict = {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # peers must resolve before they are Ready
            "selector": {naming.LABEL_JOB: name},
        }
        if port := wiring.rendezvous_port(job):
            spec["ports"] = [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]
        metadata: dict = {"name": name, "labels": labels}
        if annotations:
            metadata["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}

    def leftovers(self, objects: list[dict]) -> list[str]:
        """Role Jobs still running after the job finished: parameter servers after success,
        the other roles' Jobs after one role's Job failed."""
        # FailureTarget / SuccessCriteriaMet: the Job controller is already finishing it
        done = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")
        return [o["metadata"]["name"] for o in objects
                if not _settled(o) and not any(condition(o, c) for c in done)]

    def stop_patch(self) -> dict:
        return {"metadata": {"annotations": {SETTLED_ANNOTATION: "true"}},
                "spec": {"activeDeadlineSeconds": 1}}

    def status(self, objects: list[dict], pods: list[dict] | None = None) -> JobStatus:
        jobs = [o for o in objects if o.get("kind", "Job") == "Job"]
        if not jobs:
            return not_found()
        status = apply_pods(jobs_status(jobs), pods)
        if status.state is JobState.FAILED and pods:
            # The pods tell which failures were replaced, whatever ended the job.
            status = status.model_copy(update={"restarts": replaced_failures(pods)})
        return status


def replaced_failures(pods: list[dict]) -> int:
    """Failed pods that got a successor for the same replica (preempted ones not counted)."""
    by_replica: dict[tuple[str, str], list[dict]] = {}
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


def _role_of(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    role = (meta.get("labels") or {}).get(naming.LABEL_ROLE)
    if role:
        return role
    name, job_name = meta.get("name", ""), (meta.get("labels") or {}).get(naming.LABEL_JOB, "")
    return name[len(job_name) + 1 :] if job_name and name.startswith(job_name + "-") else name


def _failed_condition(obj: dict) -> dict | None:
    return condition(obj, "Failed") or condition(obj, "FailureTarget")


def _settled(obj: dict) -> bool:
    return SETTLED_ANNOTATION in ((obj.get("metadata") or {}).get("annotations") or {})


def _complete(obj: dict) -> bool:
    return bool(condition(obj, "Complete") or condition(obj, "SuccessCriteriaMet"))


def jobs_status(jobs: list[dict]) -> JobStatus:
    """Aggregate batch/v1 Jobs (one per role) into one JobStatus. Also used by JobSet."""
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
        if not _settled(obj):  # the pods the runner stopped are not failures of the job
            failed_pods += int(st.get("failed") or 0)

    created = earliest((o.get("metadata") or {}).get("creationTimestamp") for o in jobs)
    started = earliest((o.get("status") or {}).get("startTime") for o in jobs)
    base = {"roles": roles, "created": created, "started": started}

    for obj in jobs:
        cond = None if _settled(obj) else _failed_condition(obj)
        if cond:
            message = cond.get("message") or ""
            role = _role_of(obj)
            # Without pods: the failed pods of an index that ran out of restarts, but its last
            # one, were restarts (a FailJob rule or the deadline ends the job without any).
            final = sum(_index_count((o.get("status") or {}).get("failedIndexes") or "") for o in jobs)
            return JobStatus(
                state=JobState.FAILED,
                reason=cond.get("reason") or "Failed",
                message=f"{role}: {message}" if message else f"{role} failed",
                finished=latest([condition_time(obj, "Failed") or cond.get("lastTransitionTime")]),
                restarts=max(0, failed_pods - final) if final else 0,
                **base,
            )

    finishing = [o for o in jobs if _role_of(o) not in SERVER_ROLES] or jobs
    if all(_complete(o) for o in finishing):
        # SuccessCriteriaMet comes first; completionTime and Complete once the pods are gone.
        finished = latest(
            (o.get("status") or {}).get("completionTime") or condition_time(o, "Complete")
            or condition_time(o, "SuccessCriteriaMet") for o in finishing
        )
        # Every failed pod of a job that succeeded was replaced.
        return JobStatus(state=JobState.SUCCEEDED, reason="Completed", finished=finished,
                         restarts=failed_pods, **base)

    # spec.suspend covers the moment before the controller has written the condition.
    suspended = [o for o in jobs if condition(o, "Suspended") or (o.get("spec") or {}).get("suspend")]
    if suspended:
        cond = condition(suspended[0], "Suspended") or {}
        roles_waiting = ", ".join(_role_of(o) for o in suspended)
        message = cond.get("message") or f"suspended: {roles_waiting} (waiting for admission, e.g. Kueue)"
        return JobStatus(state=JobState.QUEUED, reason="Suspended", message=message, **base)

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
            reason="Restarting",
            message=f"{failed_pods} failed pod(s); replacements pending",
            restarts=failed_pods,
            **base,
        )
    if running:
        return JobStatus(state=JobState.RUNNING, reason="Running", restarts=failed_pods, **base)
    return JobStatus(state=JobState.PENDING, reason="Created", restarts=failed_pods, **base)
