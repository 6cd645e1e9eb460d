"""Kueue's verdict on a queued job, read from its Workloads (pure).

A job with a queue waits suspended until Kueue admits it; why it waits (no quota, no such
LocalQueue...) is on the Workload Kueue made for it (one per object it admits), not on the job.
So is a preemption: Kueue evicts the Workload (condition Evicted, reason Preempted), suspends
the job (its controller removes the pods) and requeues it; the counters of its evictions stay.
The Workloads carry the job's labels when Kueue copies them (`integrations.labelKeysToCopy:
[app.kubernetes.io/managed-by, dlc-airflow/job-name]` in Kueue's configuration), so the
waiting side finds them like the job's other objects (and needs get/list/watch on workloads,
k8s/rbac/role.yaml); without them the status says only "suspended".
"""

from __future__ import annotations

from dataclasses import dataclass

from dlc_airflow import reasons
from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.backends.base import KUEUE_QUEUE_LABEL, ON_PREEMPTION_LABEL
from dlc_airflow.k8s.backends.podspec import GPU_RESOURCE
from dlc_airflow.status import JobState, JobStatus


def queued(objects: list[Manifest]) -> bool:
    """Whether the job's objects name a Kueue queue (then it has Workloads to read)."""
    return any(KUEUE_QUEUE_LABEL in ((o.get("metadata") or {}).get("labels") or {}) for o in objects)


def pending_message(workloads: list[Manifest]) -> str | None:
    """Why Kueue holds the job: the QuotaReserved=False message of a Workload not admitted."""
    for workload in workloads:
        conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
        if (conditions.get("Admitted") or {}).get("status") == "True":
            continue
        reserved = conditions.get("QuotaReserved") or {}
        if reserved.get("status") == "False" and reserved.get("message"):
            return str(reserved["message"])
    return None


def evictions(workloads: list[Manifest]) -> int:
    """How often Kueue preempted (or evicted for failed nodes) the job: the Workloads' counters,
    which survive re-admission."""
    total = 0
    for workload in workloads:
        stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        total += sum(int(e.get("count") or 0) for e in stats if e.get("reason") in _REQUEUED)
    return total


def evicted(workloads: list[Manifest]) -> Manifest | None:
    """The Evicted condition of a Workload Kueue took the quota back from (preempted, or its
    nodes failed) and that is not admitted again yet; None otherwise."""
    for workload in workloads:
        conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
        cond = conditions.get("Evicted") or {}
        if cond.get("status") == "True" and cond.get("reason") in _REQUEUED:
            return cond
    return None


# Eviction reasons after which Kueue requeues the job by itself (not a user's deactivation).
_REQUEUED = ("Preempted", "NodeFailures")


def with_kueue_verdict(status: JobStatus, workloads: list[Manifest], objects: list[Manifest] | None = None) -> JobStatus:
    """The job's status with what Kueue says about it:

    - preempted (the job's pods are being or were removed, the job requeued): RESTARTING,
      reason Preempted, with Kueue's message - or FAILED when the job's fault tolerance says a
      preemption fails it (restart_on_preemption off: label ON_PREEMPTION_LABEL);
    - every preemption so far counts as a restart (it does not use up max_restarts);
    - suspended for admission: Kueue's reason it waits.
    """
    preemptions = evictions(workloads)
    if preemptions:
        status = status.model_copy(update={"restarts": status.restarts + preemptions})
    if status.terminal:
        return status
    cond = evicted(workloads)
    if cond is not None:
        message = f"Kueue: {cond.get('message') or 'preempted'}"
        if fails_on_preemption(objects or []):
            return status.model_copy(update={"state": JobState.FAILED, "reason": reasons.PREEMPTED,
                                             "message": message + " (fault_tolerance.restart_on_preemption is off)"})
        return status.model_copy(update={"state": JobState.RESTARTING, "reason": reasons.PREEMPTED,
                                         "message": message + " (requeued: it runs again once admitted)",
                                         "restarts": max(status.restarts, 1)})
    if status.state is not JobState.QUEUED or status.reason != reasons.SUSPENDED:
        return status
    pending = pending_message(workloads)
    return status.model_copy(update={"message": f"Kueue: {pending}"}) if pending else status


def fails_on_preemption(objects: list[Manifest]) -> bool:
    """The job's fault tolerance says a preemption fails it (restart_on_preemption off)."""
    return any(((o.get("metadata") or {}).get("labels") or {}).get(ON_PREEMPTION_LABEL) == "fail" for o in objects)


# -- where a queued job stands (Kueue's visibility API) --------------------------------------


@dataclass(frozen=True)
class QueuePosition:
    """A pending job's place: 1-based positions, and what waits ahead of it in its LocalQueue."""

    local_queue: str
    in_local_queue: int
    in_cluster_queue: int
    ahead: int  # workloads ahead of it in its LocalQueue
    gpus_ahead: int  # GPUs those ask for

    def describe(self) -> str:
        ahead = "nothing ahead" if not self.ahead else \
            f"{self.ahead} workload{'s' if self.ahead != 1 else ''} ahead asking {self.gpus_ahead} GPU" \
            f"{'s' if self.gpus_ahead != 1 else ''}"
        return (f"queue position {self.in_local_queue} in LocalQueue {self.local_queue} "
                f"({self.in_cluster_queue} in its ClusterQueue); {ahead}")


def queue_position(pending: list[Manifest], job_uid: str, workloads: list[Manifest]) -> QueuePosition | None:
    """Where the job whose primary object has `job_uid` stands among its LocalQueue's pending
    workloads (the visibility API's list, positions 0-based), with the GPUs of the workloads
    ahead of it read from `workloads` (the namespace's, by name); None when it is not pending."""
    mine = [p for p in pending if any(o.get("uid") == job_uid for o in (p.get("metadata") or {}).get("ownerReferences") or [])]
    if not mine:
        return None
    me = min(mine, key=lambda p: int(p.get("positionInLocalQueue") or 0))
    position = int(me.get("positionInLocalQueue") or 0)
    ahead = [str((p.get("metadata") or {}).get("name")) for p in pending
             if int(p.get("positionInLocalQueue") or 0) < position]
    by_name = {str((w.get("metadata") or {}).get("name")): w for w in workloads}
    return QueuePosition(local_queue=str(me.get("localQueueName") or ""), in_local_queue=position + 1,
                         in_cluster_queue=int(me.get("positionInClusterQueue") or 0) + 1, ahead=len(ahead),
                         gpus_ahead=sum(workload_gpus(by_name[n]) for n in ahead if n in by_name))


def workload_gpus(workload: Manifest) -> int:
    """GPUs a Workload asks for: every pod set's count x its containers' GPU requests."""
    total = 0
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        spec = ((pod_set.get("template") or {}).get("spec")) or {}
        per_pod = sum(_quantity(((c.get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE)
                                or ((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE))
                      for c in spec.get("containers") or [])
        total += int(pod_set.get("count") or 0) * per_pod
    return total


def _quantity(value: object) -> int:
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0
