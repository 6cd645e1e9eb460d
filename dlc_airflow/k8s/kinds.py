"""API kinds dlc-airflow reads and writes, and their REST paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceKind:
    api_version: str  # "v1", "batch/v1", "kubeflow.org/v1"
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [root]
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.kind} is namespaced: give a namespace")
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version}"


POD = ResourceKind("v1", "Pod", "pods")
SERVICE = ResourceKind("v1", "Service", "services")
CONFIG_MAP = ResourceKind("v1", "ConfigMap", "configmaps")
EVENT = ResourceKind("v1", "Event", "events")
NAMESPACE = ResourceKind("v1", "Namespace", "namespaces", namespaced=False)
SECRET = ResourceKind("v1", "Secret", "secrets")
NODE = ResourceKind("v1", "Node", "nodes", namespaced=False)
JOB = ResourceKind("batch/v1", "Job", "jobs")
PYTORCH_JOB = ResourceKind("kubeflow.org/v1", "PyTorchJob", "pytorchjobs")
TF_JOB = ResourceKind("kubeflow.org/v1", "TFJob", "tfjobs")
MPI_JOB = ResourceKind("kubeflow.org/v1", "MPIJob", "mpijobs")
XGBOOST_JOB = ResourceKind("kubeflow.org/v1", "XGBoostJob", "xgboostjobs")
TRAIN_JOB = ResourceKind("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs")
JOBSET = ResourceKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets")
RAY_JOB = ResourceKind("ray.io/v1", "RayJob", "rayjobs")

KNOWN: dict[tuple[str, str], ResourceKind] = {
    (k.api_version, k.kind): k
    for k in (
        POD, SERVICE, CONFIG_MAP, EVENT, NAMESPACE, SECRET, NODE, JOB, PYTORCH_JOB, TF_JOB,
        MPI_JOB, XGBOOST_JOB, TRAIN_JOB, JOBSET, RAY_JOB,
    )
}


def kind_of(obj: dict) -> ResourceKind:
    """The ResourceKind of a manifest (by apiVersion and kind)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    try:
        return KNOWN[key]
    except KeyError:
        raise ValueError(f"unknown kind {key[1]!r} of apiVersion {key[0]!r}") from None
