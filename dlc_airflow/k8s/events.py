"""Kubernetes Events about a job, as the runner contract's Events (pure)."""

from __future__ import annotations

from dlc_airflow.k8s.api import Event as KubeEvent
from dlc_airflow.runner import Event

# Event reasons of a controller that could not create a pod: the Job controller's (native,
# and the Jobs JobSet and Trainer make), the Training Operator's, KubeRay's.
FAILED_CREATE_REASONS = frozenset({"FailedCreate", "FailedCreatePod", "FailedToCreateHeadPod",
                                   "FailedToCreateWorkerPod"})


def is_job_event(event: KubeEvent, job: str) -> bool:
    """An Event about one of the job's objects or pods (their names start with the job name)."""
    name = (event.get("involvedObject") or {}).get("name", "")
    return name == job or name.startswith(job + "-")


def event_of(event: KubeEvent) -> Event:
    obj = event.get("involvedObject") or {}
    reason = event.get("reason") or ""
    return Event(uid=(event.get("metadata") or {}).get("uid", ""),
                 time=(event.get("lastTimestamp") or event.get("eventTime")
                       or (event.get("metadata") or {}).get("creationTimestamp") or ""),
                 object=f"{obj.get('kind', '?')} {obj.get('name', '?')}", reason=reason,
                 message=(event.get("message") or "").strip(), warning=event.get("type") == "Warning",
                 count=int(event.get("count") or 1), blocks_start=reason in FAILED_CREATE_REASONS)
