"""What every Kubernetes backend answers, and the status helpers they share.

A backend is a set of pure functions over plain dicts:

- `job_types`: the job types the backend runs (a class attribute, read by the registry);
- `check(job)`: can this backend run the job? (BackendError naming what to use instead): the
  type against `job_types` here, the options in each backend's `check_options`
- `render(job, name, identity, attempt)`: the objects to create, in creation order; the first
  is the *primary* (the client gives every later object an ownerReference to it, so deleting
  the primary deletes the job);
- `kind(job)` / `kinds(job)`: the kind the waiting side watches, and every kind render makes;
- `status(objects, pods)`: the job's normalised JobStatus from the server's objects of the
  watched kind (and optionally its pods, for scheduler and exit-code detail).

Nothing here talks to a cluster.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import ClassVar

from dlc_airflow import naming, reasons
from dlc_airflow.errors import BackendError, unsupported_type
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.api import Condition, ContainerStateTerminated, ContainerStatus, Manifest, Pod

# One ResourceKind for the whole package: the client builds REST paths from it.
from dlc_airflow.k8s.kinds import CONFIG_MAP, JOB, SERVICE, ResourceKind
from dlc_airflow.naming import check_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts, condition, parse_time

__all__ = [
    "CONFIG_MAP",
    "JOB",
    "KUEUE_PRIORITY_LABEL",
    "KUEUE_QUEUE_LABEL",
    "ON_PREEMPTION_LABEL",
    "SERVICE",
    "Backend",
    "ResourceKind",
    "apply_pods",
    "earliest",
    "latest",
    "object_annotations",
    "object_labels",
    "pod_failure",
    "pod_role_counts",
    "unschedulable",
]

# Kueue admits workloads that carry this label (the value is a LocalQueue).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# ... with this priority (a WorkloadPriorityClass): who preempts whom
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# On a queued job whose fault tolerance says a preemption fails it (restart_on_preemption
# off): Kueue would requeue it, so the waiting side fails it instead (backends/kueue.py).
ON_PREEMPTION_LABEL = naming.PREFIX + "on-preemption"
# On the objects of a job the runner stopped (KubeRunner.stop): the status mapping says STOPPED.
STOPPED_ANNOTATION = naming.PREFIX + "stopped"


def object_labels(
    job: DLCJob,
    name: str,
    identity: naming.TaskIdentity | None,
    attempt: int | None,
    role: str | None = None,
) -> dict[str, str]:
    """The user's labels under ours (ours win: the waiting side selects on them)."""
    labels = {**job.labels, **naming.job_labels(name, identity, attempt)}
    if role is not None:
        labels[naming.LABEL_ROLE] = role
    return labels


def object_annotations(job: DLCJob, identity: naming.TaskIdentity | None) -> dict[str, str]:
    return {**job.annotations, **naming.job_annotations(identity)}


def queue_labels(job: DLCJob) -> dict[str, str]:
    """Kueue's labels for the top-level object(s), when the job names a queue: the queue, its
    priority, and what a preemption by Kueue means for it."""
    if not job.scheduling.queue:
        return {}
    labels = {KUEUE_QUEUE_LABEL: job.scheduling.queue}
    if job.scheduling.queue_priority:
        labels[KUEUE_PRIORITY_LABEL] = job.scheduling.queue_priority
    if not job.fault_tolerance.restart_on_preemption:
        labels[ON_PREEMPTION_LABEL] = "fail"
    return labels


def deadline_seconds(job: DLCJob) -> int | None:
    if job.max_running_time is None:
        return None
    return max(1, int(job.max_running_time.total_seconds()))


def ttl_seconds(job: DLCJob) -> int | None:
    if job.ttl_after_finished is None:
        return None
    return max(0, int(job.ttl_after_finished.total_seconds()))


def _probe(job_type: JobType) -> DLCJob:
    """The smallest job of a type: what the kind of a backend's objects depends on."""
    return DLCJob.model_validate({"type": job_type, "image": "probe", "command": ["probe"]})


def check_slices(job: DLCJob) -> None:
    """Kueue places slices of slice_size pods on every pod set: each role's replicas must be a
    whole number of slices (Kueue would deactivate the Workload, and the job wait for nothing)."""
    topology = job.scheduling.topology
    if topology is None or not topology.slice_size:
        return
    odd = {role: spec.replicas for role, spec in job.roles.items() if spec.replicas % topology.slice_size}
    if odd:
        raise BackendError(f"scheduling.topology.slice_size {topology.slice_size}: every role's replicas must be a "
                           f"multiple of it, and {odd} are not: change slice_size or the replicas")


class Backend(ABC):
    """Base class of the Kubernetes backends; subclasses fill in the abstract parts."""

    name: ClassVar[str]
    # The job types this backend runs: the one place that says so (check() refuses the
    # others, and the registry's backends_running() reads it to suggest a backend).
    job_types: ClassVar[frozenset[JobType]]
    # Why the other types cannot run here: the parenthesis of the one-line BackendError.
    refusal: ClassVar[str]

    def check(self, job: DLCJob) -> None:
        """Raise BackendError if this backend cannot run `job` (type or option)."""
        if job.type not in self.job_types:
            raise unsupported_type(job.type.value, self.name, self.refusal)
        check_slices(job)
        self.check_options(job)

    def check_options(self, job: DLCJob) -> None:  # noqa: B027 - optional hook, no refusals by default
        """Raise BackendError for what this backend cannot express of a job of a type it runs."""

    def render(
        self,
        job: DLCJob,
        name: str,
        identity: naming.TaskIdentity | None = None,
        attempt: int | None = None,
    ) -> list[Manifest]:
        """The job's objects in creation order; the first one is the primary.

        A job with secret env values (Airflow sources, secret-looking literals) also gets its
        own Secret, second: right after the primary that owns it, before the other objects
        whose pods read it. Its values are placeholders here (dlc_airflow.secrets)."""
        from dlc_airflow.errors import SecretSourceError
        from dlc_airflow.k8s.backends.jobsecret import job_secret

        check_name(name, self.name)
        self.check(job)
        objects = self._render(job, name, identity, attempt)
        try:
            secret = job_secret(job, name, object_labels(job, name, identity, attempt), object_annotations(job, identity))
        except SecretSourceError as exc:
            raise BackendError(str(exc)) from None
        if secret is not None:
            objects.insert(1, secret)
        # A JSON round trip: plain JSON types only, and no dict shared between two places
        # (a client mutating one object must not change another).
        copied: list[Manifest] = json.loads(json.dumps(objects))
        return copied

    def preview(self, job: DLCJob, name: str) -> list[Manifest]:
        """What `dlc-airflow render` prints: the objects, secret values as placeholders."""
        return self.render(job, name)

    @abstractmethod
    def _render(
        self, job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int | None
    ) -> list[Manifest]: ...

    @abstractmethod
    def kind(self, job: DLCJob) -> ResourceKind:
        """The kind whose objects `status()` reads (the one the waiting side watches)."""

    def kinds(self, job: DLCJob) -> list[ResourceKind]:
        """Every kind render() produces, the watched one first (what stop deletes), but Secrets:
        owned by the primary, they go with it (the runner's Role may not list Secrets)."""
        return [self.kind(job)]

    def primary_kinds(self) -> tuple[ResourceKind, ...]:
        """Every kind `kind()` may answer (finding a job by name alone looks in each)."""
        return tuple(dict.fromkeys(self.kind(_probe(t)) for t in sorted(self.job_types, key=str)))

    def status(self, objects: list[Manifest], pods: Sequence[Pod] | None = None) -> JobStatus:
        """The JobStatus of the job from its current objects (and pods, if given). A job
        dlc-airflow stopped (STOPPED_ANNOTATION) is STOPPED, unless it had succeeded or failed
        on its own first."""
        return stopped_by_us(objects, self._status(objects, pods))

    @abstractmethod
    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        """What the backend's objects (and pods) say of the job."""

    def stop_patch(self) -> Manifest:
        """The merge patch that stops the job's objects of the watched kind and keeps them: a
        suspended job's controller removes its pods (native Jobs: `NativeBackend.stop_patch`).
        The runner adds STOPPED_ANNOTATION, which the status mapping reads."""
        return {"spec": {"suspend": True}}

    def leftovers(self, objects: list[Manifest]) -> list[str]:
        """Names of objects still running once the job as a whole has finished (they would
        run on, holding nodes): the runner stops them with `settle_patch`. CRD backends'
        controllers do this themselves."""
        return []

    def settle_patch(self) -> Manifest:
        """The merge patch that stops a leftover and keeps it for inspection."""
        raise NotImplementedError(f"the {self.name} backend has no leftovers to stop")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# -- status helpers shared by every backend ---------------------------------------------------


def stop_annotations() -> Manifest:
    """What the runner's stop adds to each object it stops (with the backend's stop_patch)."""
    return {"metadata": {"annotations": {STOPPED_ANNOTATION: "true"}}}


def stopped_by_us(objects: list[Manifest], status: JobStatus) -> JobStatus:
    """STOPPED when dlc-airflow stopped the job (STOPPED_ANNOTATION on one of its objects) and
    it had not succeeded, nor failed before the stop (a failure the stop caused - a native Job's
    deadline - is the stop's)."""
    if not any(STOPPED_ANNOTATION in ((o.get("metadata") or {}).get("annotations") or {}) for o in objects):
        return status
    if status.state is JobState.SUCCEEDED or status.state is JobState.STOPPED:
        return status
    if status.state is JobState.FAILED and status.reason != reasons.DEADLINE_EXCEEDED:
        return status
    active = {role: counts.model_copy(update={"active": 0}) for role, counts in status.roles.items()}
    return status.model_copy(update={"state": JobState.STOPPED, "reason": reasons.STOPPED, "roles": active,
                                     "message": "stopped by dlc-airflow (the job's objects are kept)"})


def not_found() -> JobStatus:
    return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND, message="the job's objects are gone (deleted)")


def earliest(values: Iterable[object]) -> datetime | None:
    times = [t for t in (parse_time(v) for v in values) if t is not None]
    return min(times) if times else None


def latest(values: Iterable[object]) -> datetime | None:
    times = [t for t in (parse_time(v) for v in values) if t is not None]
    return max(times) if times else None


def condition_time(obj: Manifest, ctype: str) -> object:
    cond = condition(obj, ctype)
    return (cond or {}).get("lastTransitionTime")


def _pod_condition(pod: Pod, ctype: str) -> Condition | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def unschedulable(pods: Sequence[Pod] | None) -> tuple[str, str] | None:
    """(pod name, scheduler message) of the first pending pod the scheduler cannot place."""
    for pod in sorted(pods or [], key=lambda p: (p.get("metadata") or {}).get("name", "")):
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            continue
        cond = _pod_condition(pod, "PodScheduled")
        if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return (pod.get("metadata") or {}).get("name", ""), cond.get("message", "")
    return None


def _terminated(status: ContainerStatus) -> ContainerStateTerminated | None:
    state = status.get("state") or {}
    last = status.get("lastState") or {}
    return state.get("terminated") or last.get("terminated")


def pod_failure(pods: Sequence[Pod] | None) -> str:
    """What failed, from the pods: 'pod P container C exited with code N (OOMKilled)'.

    Looks at failed pods first (newest last, so the latest failure wins), then at containers
    that terminated with a non-zero code in pods that are still around.
    """
    candidates = []
    for pod in pods or []:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        failed_pod = status.get("phase") == "Failed"
        for kind, statuses in (("init container", status.get("initContainerStatuses")),
                               ("container", status.get("containerStatuses"))):
            for cs in statuses or []:
                term = _terminated(cs)
                if term and term.get("exitCode", 0) != 0:
                    text = f"pod {meta.get('name', '?')} {kind} {cs.get('name', '?')} exited with code {term.get('exitCode')}"
                    extra = [v for v in (term.get("reason"), term.get("message")) if v]
                    if extra:
                        text += f" ({': '.join(str(v).strip() for v in extra)})"
                    if term.get("reason") == OOM_KILLED:
                        text += f": {out_of_memory(pod, cs.get('name', ''))}"
                    candidates.append((failed_pod, str(term.get("finishedAt") or ""), text))
        if failed_pod and status.get("reason") and not any(c[2].startswith(f"pod {meta.get('name')}") for c in candidates):
            # Evicted, DeadlineExceeded...: the pod failed without a container exit code.
            text = f"pod {meta.get('name', '?')} failed: {status.get('reason')}"
            if status.get("message"):
                text += f" ({status['message']})"
            candidates.append((True, "", text))
    if not candidates:
        return ""
    candidates.sort(key=lambda c: (c[0], c[1]))
    return candidates[-1][2]


OOM_KILLED = reasons.OOM_KILLED  # the kubelet's word, and ours


def out_of_memory(pod: Pod, container: str) -> str:
    """What an OOM kill means, in the words of the spec: the limit, and what to raise."""
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    limit = next(((c.get("resources") or {}).get("limits", {}).get("memory") for c in containers
                  if c.get("name") == container), None)
    used = f"its memory limit ({limit})" if limit else "the memory it may use"
    return f"it ran out of memory: the kernel killed it for using more than {used}; raise resources.memory"


def ran(pod: Pod) -> bool:
    """The pod's containers started (it runs, or ran to success): its job is past PENDING,
    whatever its controller's counts say in the moment before they catch up."""
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded")


def pod_role_counts(pods: Sequence[Pod] | None) -> dict[str, RoleCounts]:
    """Per-role pod counts (by the dlc-airflow/role label): active, succeeded, failed."""
    counts: dict[str, RoleCounts] = {}
    for pod in pods or []:
        role = ((pod.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_ROLE)
        if not role:
            continue
        c = counts.setdefault(role, RoleCounts())
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Succeeded":
            c.succeeded += 1
        elif phase == "Failed":
            c.failed += 1
        else:
            c.active += 1
    return counts


# Container waiting reasons of a pod that cannot start its containers (the kubelet retries
# them, but nothing changes without a fix: a wrong image, a missing Secret or ConfigMap key).
CANNOT_START_WAITING = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError",
})


def cannot_start(pods: Sequence[Pod] | None) -> str:
    """'pod P container C: ImagePullBackOff: <the kubelet's message>' of the first pod whose
    containers cannot start; '' if none."""
    for pod in sorted(pods or [], key=lambda p: (p.get("metadata") or {}).get("name", "")):
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            continue
        for statuses in (status.get("initContainerStatuses"), status.get("containerStatuses")):
            for cs in statuses or []:
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in CANNOT_START_WAITING:
                    text = f"pod {(pod.get('metadata') or {}).get('name', '?')} container {cs.get('name', '?')}: {waiting['reason']}"
                    return f"{text}: {waiting['message'].strip()}" if waiting.get("message") else text
    return ""


def apply_pods(status: JobStatus, pods: Sequence[Pod] | None) -> JobStatus:
    """Refine a status with what the pods say.

    - a live job with a pod the scheduler cannot place is QUEUED, reason Unschedulable, with
      the scheduler's message verbatim (the waiting side fails it after its queue timeout);
    - a live job with a pod whose containers cannot start (image pull, config error) is
      QUEUED, reason CannotStart, with the kubelet's message (failed after queue_timeout, or
      a default when none is set: progress.CANNOT_START_TIMEOUT);
    - a PENDING job with a pod that runs or ran is RUNNING;
    - a failed job's message gains the failing container's exit code and reason.
    """
    if not pods:
        return status
    if not status.terminal and not (status.state is JobState.QUEUED and status.reason == reasons.SUSPENDED):
        found = unschedulable(pods)
        if found:
            return status.model_copy(
                update={"state": JobState.QUEUED, "reason": reasons.UNSCHEDULABLE, "message": found[1]}
            )
        if blocked := cannot_start(pods):
            return status.model_copy(
                update={"state": JobState.QUEUED, "reason": reasons.CANNOT_START, "message": blocked}
            )
        if status.state is JobState.PENDING and any(ran(pod) for pod in pods):
            # a replica that finished leaves the Job's active-but-not-ready count behind it
            # for a moment: the job did not go back to pending
            return status.model_copy(update={"state": JobState.RUNNING, "reason": reasons.RUNNING})
    if status.state is JobState.FAILED:
        detail = pod_failure(pods)
        # an OOM kill is the reason whatever ended the job after it (its exit code 137 under
        # the FailJob rule, the restart limit): the retry policy tells it from other failures
        update = {"reason": reasons.OOM_KILLED} if f"({OOM_KILLED}" in detail else {}
        if detail and detail not in status.message:
            update["message"] = f"{status.message}; {detail}" if status.message else detail
        return status.model_copy(update=update) if update else status
    return status
