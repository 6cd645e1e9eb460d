"""Pure helpers on a job's pods: which replica a pod is, and in which order replicas come.

Apart from the runner (no I/O, no client), so the neutral code that orders replicas (jobinfo,
the wait's log streaming) does not import the Kubernetes runner.
"""

from __future__ import annotations

from dlc_airflow.naming import LABEL_ROLE

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def replica_name(pod: dict) -> str:
    """`<role>-<index>` of a pod, for log prefixes."""
    meta = pod.get("metadata", {})
    labels, annotations = meta.get("labels", {}), meta.get("annotations", {})
    role = (labels.get(LABEL_ROLE) or labels.get("training.kubeflow.org/replica-type")
            or labels.get("ray.io/node-type") or "pod")
    index = (annotations.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
             or labels.get("training.kubeflow.org/replica-index"))
    return f"{role.lower()}-{index}" if index is not None else meta.get("name", role)


def replica_order(pod: dict) -> tuple[int, int, str]:
    """Coordinator replicas first, then by index: rank 0 is the first pod."""
    coordinator, index = rank_key(pod)
    return (-coordinator, -index, replica_name(pod))


def rank_key(pod: dict) -> tuple[int, int]:
    role = pod.get("metadata", {}).get("labels", {}).get(LABEL_ROLE, "")
    index = int(pod.get("metadata", {}).get("annotations", {}).get(COMPLETION_INDEX, "0") or 0)
    coordinator = role in ("master", "chief", "launcher", "head")
    # sorted(reverse=True): workers first, the coordinator's index 0 last (so it wins)
    return (1 if coordinator else 0, -index)
