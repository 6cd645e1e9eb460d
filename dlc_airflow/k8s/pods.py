"""Pure helpers on a job's pods: which replica a pod is, in which order replicas come, and a
pod as the runner contract's Replica (its name and container, what it reported, kept in the
Replica's backend-private detail for the runner's own reads of logs and outputs)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from dlc_airflow.k8s.api import ContainerStateTerminated, Pod
from dlc_airflow.naming import LABEL_ROLE
from dlc_airflow.runner import COORDINATOR_ROLES, Replica
from dlc_airflow.status import parse_time

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Replica.detail keys
POD_NAME, CONTAINER, MESSAGE = "pod", "container", "message"
STARTED_PHASES = ("Running", "Succeeded", "Failed")
_STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def stamped_line(raw: str) -> tuple[str, str] | None:
    """(timestamp, text) of a line of `timestamps=true` pod logs; None for a line without
    one: what the kubelet writes into the stream when it cannot read the container's log
    (e.g. "unable to retrieve container logs for containerd://..." while the runtime
    restarts), which is no line of the job's and no position to resume from."""
    stamp, _, text = raw.partition(" ")
    return (stamp, text) if _STAMP.match(stamp) else None


def replica_name(pod: Pod) -> str:
    """`<role>-<index>` of a pod, for log prefixes."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    role = (labels.get(LABEL_ROLE) or labels.get("training.kubeflow.org/replica-type")
            or labels.get("ray.io/node-type") or "pod")
    index = (annotations.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
             or labels.get("training.kubeflow.org/replica-index"))
    return f"{role.lower()}-{index}" if index is not None else meta.get("name", role)


def replica_order(pod: Pod) -> tuple[int, int, str]:
    """Coordinator replicas first, then by index: rank 0 is the first pod."""
    meta = pod.get("metadata") or {}
    role = (meta.get("labels") or {}).get(LABEL_ROLE, "")
    index = int((meta.get("annotations") or {}).get(COMPLETION_INDEX, "0") or 0)
    return (0 if role in COORDINATOR_ROLES else 1, index, replica_name(pod))


def main_container(pod: Pod) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return containers[0].get("name", "")


def termination_message(pod: Pod) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        message = ((status.get("state") or {}).get("terminated") or {}).get("message")
        if message:
            return message
    return ""


def unwell(pod: Pod) -> str:
    """Why a running pod cannot be vouched for ('' when it can). The kubelet gives every Ready=False
    it writes a reason (ContainersNotReady...); a Ready=False without one on a running pod was
    written by the node lifecycle controller, because the pod's node stopped reporting."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "False" and not condition.get("reason"):
            return "its node stopped reporting (NodeNotReady): the pod is marked not ready"
    return ""


def replicas_of(pods: Iterable[Pod]) -> list[Replica]:
    """The replicas of a job's pods, coordinator first, then by index."""
    found = []
    for pod in sorted(pods, key=replica_order):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = replica_name(pod)
        role, _, index = name.rpartition("-")
        statuses = status.get("containerStatuses") or []
        terminated = next((t for s in statuses if (t := (s.get("state") or {}).get("terminated"))),
                          ContainerStateTerminated())
        disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
        found.append(Replica(
            name=name, role=role or name, index=int(index) if index.isdigit() else 0,
            state=status.get("phase") or "Pending", started=parse_time(status.get("startTime")),
            finished=parse_time(terminated.get("finishedAt")), exit_code=terminated.get("exitCode"),
            reason="Preempted" if disrupted else (terminated.get("reason") or ""),
            restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
            node=(pod.get("spec") or {}).get("nodeName") or "", uid=meta.get("uid") or "", unwell=unwell(pod),
            detail={POD_NAME: meta.get("name", ""), CONTAINER: main_container(pod),
                    MESSAGE: termination_message(pod)}))
    return found
