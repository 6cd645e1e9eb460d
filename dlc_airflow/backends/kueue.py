"""Kueue's verdict on a queued job, read from its Workloads (pure).

A job with a queue waits suspended until Kueue admits it; why it waits (no quota, no such
LocalQueue...) is on the Workload Kueue made for it (one per object it admits), not on the job.
The Workloads carry the job's labels when Kueue copies them (`integrations.labelKeysToCopy:
[app.kubernetes.io/managed-by, dlc-airflow/job-name]` in Kueue's configuration), so the
waiting side finds them like the job's other objects (and needs get/list/watch on workloads,
k8s/rbac/role.yaml); without them the status says only "suspended".
"""

from __future__ import annotations

from dlc_airflow import reasons
from dlc_airflow.backends.base import KUEUE_QUEUE_LABEL
from dlc_airflow.status import JobState, JobStatus


def queued(objects: list[dict]) -> bool:
    """Whether the job's objects name a Kueue queue (then it has Workloads to read)."""
    return any(KUEUE_QUEUE_LABEL in ((o.get("metadata") or {}).get("labels") or {}) for o in objects)


def pending_message(workloads: list[dict]) -> str | None:
    """Why Kueue holds the job: the QuotaReserved=False message of a Workload not admitted."""
    for workload in workloads:
        conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
        if (conditions.get("Admitted") or {}).get("status") == "True":
            continue
        reserved = conditions.get("QuotaReserved") or {}
        if reserved.get("status") == "False" and reserved.get("message"):
            return str(reserved["message"])
    return None


def with_kueue_verdict(status: JobStatus, workloads: list[dict]) -> JobStatus:
    """A job suspended for admission gets Kueue's own reason as its message."""
    if status.state is not JobState.QUEUED or status.reason != reasons.SUSPENDED:
        return status
    message = pending_message(workloads)
    return status.model_copy(update={"message": f"Kueue: {message}"}) if message else status
