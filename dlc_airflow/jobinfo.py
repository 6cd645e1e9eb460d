"""What the job CLI and the report page show of a job, the same on every backend (pure).

`JobInfo` is a job as a list shows it: where it is and which task instance made it.
`Replica` is one replica (a pod, a local process, a Slurm task) as last seen, for the
timeline: when it started and ended, how, on which node. Each runner fills them in
(`JobRunner.jobs`, `JobRunner.replicas`); Kubernetes-shaped pods (Kubernetes, and the DLC
service's pods, which its runner shapes the same way) go through `replicas_from_pods`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dlc_airflow.jobref import JobRef
from dlc_airflow.naming import LABEL_ATTEMPT, LABEL_DAG, LABEL_MAP_INDEX, LABEL_RUN, LABEL_TASK, LABEL_TRY
from dlc_airflow.status import parse_time


@dataclass(frozen=True)
class JobInfo:
    ref: JobRef
    dag_id: str = ""  # "" for a job made outside Airflow (dlc-airflow jobs clone)
    task_id: str = ""
    run_id: str = ""
    map_index: int = -1
    try_number: int = 0
    created: datetime | None = None

    @classmethod
    def of(cls, ref: JobRef, labels: dict[str, str], annotations: dict[str, str] | None = None,
           created: datetime | None = None) -> JobInfo:
        """From a job's labels, with the unabridged ids of its annotations where it has them
        (labels are cut and hashed to fit 63 characters)."""
        full = {**labels, **(annotations or {})}
        index, tried = full.get(LABEL_MAP_INDEX, ""), labels.get(LABEL_TRY, "")
        return cls(ref=ref, dag_id=full.get(LABEL_DAG, ""), task_id=full.get(LABEL_TASK, ""),
                   run_id=full.get(LABEL_RUN, ""), map_index=int(index) if index.lstrip("-").isdigit() else -1,
                   try_number=int(tried) if tried.isdigit() else 0, created=created)

    def matches(self, dag_id: str | None = None, task_id: str | None = None, run_id: str | None = None) -> bool:
        return all(want is None or want == have for want, have in
                   ((dag_id, self.dag_id), (task_id, self.task_id), (run_id, self.run_id)))


def attempt_of(labels: dict[str, str]) -> int:
    value = labels.get(LABEL_ATTEMPT, "1")
    return int(value) if value.isdigit() else 1


@dataclass(frozen=True)
class Replica:
    name: str  # <role>-<index>, as the task log prefixes its lines
    role: str
    index: int
    state: str  # Pending, Running, Succeeded, Failed (a pod's phase; the same words elsewhere)
    started: datetime | None = None
    finished: datetime | None = None
    exit_code: int | None = None
    reason: str = ""  # why it ended (OOMKilled, Error, preempted...)
    restarts: int = 0  # in place (a container restarted by the kubelet, a local process)
    node: str = ""
    uid: str = ""  # tells a replica's successive pods apart


def replicas_from_pods(pods: list[dict]) -> list[Replica]:
    """The replicas of Kubernetes-shaped pods, coordinator first, then by role and index."""
    from dlc_airflow.k8s.pods import replica_name, replica_order

    found = []
    for pod in sorted(pods, key=replica_order):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = replica_name(pod)
        role, _, index = name.rpartition("-")
        terminated = next((s.get("state", {}).get("terminated") for s in status.get("containerStatuses") or []
                           if (s.get("state") or {}).get("terminated")), None) or {}
        disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
        found.append(Replica(
            name=name, role=role or name, index=int(index) if index.isdigit() else 0,
            state=status.get("phase") or "Pending", started=parse_time(status.get("startTime")),
            finished=parse_time(terminated.get("finishedAt")), exit_code=terminated.get("exitCode"),
            reason="Preempted" if disrupted else (terminated.get("reason") or ""),
            restarts=sum(int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or []),
            node=(pod.get("spec") or {}).get("nodeName") or "", uid=meta.get("uid") or ""))
    return found
