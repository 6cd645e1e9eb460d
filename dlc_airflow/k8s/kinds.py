"""API kinds dlc-airflow reads and writes, and their REST paths."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSON, JSONDict
from dlc_airflow.k8s.api import Manifest


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
WORKLOAD = ResourceKind("kueue.x-k8s.io/v1beta2", "Workload", "workloads")  # Kueue's, read only
# asked by the client itself: who am I, and may I (every authenticated identity may create both)
SELF_SUBJECT_REVIEW = ResourceKind("authentication.k8s.io/v1", "SelfSubjectReview", "selfsubjectreviews",
                                   namespaced=False)
SELF_SUBJECT_ACCESS_REVIEW = ResourceKind("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                                          "selfsubjectaccessreviews", namespaced=False)

KNOWN: dict[tuple[str, str], ResourceKind] = {
    (k.api_version, k.kind): k
    for k in (
        POD, SERVICE, CONFIG_MAP, EVENT, NAMESPACE, SECRET, NODE, JOB, PYTORCH_JOB, TF_JOB,
        MPI_JOB, XGBOOST_JOB, TRAIN_JOB, JOBSET, RAY_JOB, WORKLOAD,
    )
}


def kinds_detail(kinds: Sequence[ResourceKind]) -> JSONDict:
    """A JobRef's detail on Kubernetes: every kind the job is made of, the watched one first."""
    listed: list[JSON] = [dict(asdict(k)) for k in kinds]
    return {"kinds": listed}


def ref_kinds(ref: JobRef) -> tuple[ResourceKind, ...]:
    """The kinds a JobRef's detail names (kinds_detail), the watched one first; () if none."""
    listed = ref.detail.get("kinds")
    if not isinstance(listed, list):
        return ()
    kinds = []
    for item in listed:
        if isinstance(item, dict):
            kinds.append(ResourceKind(api_version=str(item["api_version"]), kind=str(item["kind"]),
                                      plural=str(item["plural"]), namespaced=bool(item.get("namespaced", True))))
    return tuple(kinds)


def kind_of(obj: Manifest) -> ResourceKind:
    """The ResourceKind of a manifest (by apiVersion and kind)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    try:
        return KNOWN[key]
    except KeyError:
        raise ValueError(f"unknown kind {key[1]!r} of apiVersion {key[0]!r}") from None


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_attributes(method: str, path: str, query: Manifest | None = None) -> dict[str, str]:
    """What the authorizer sees in a REST call: verb, group, resource, subresource, name,
    namespace (the fields of a SelfSubjectAccessReview's resourceAttributes), or verb and
    nonResourceURL for paths outside /api and /apis (e.g. /readyz).

    >>> request_attributes("GET", "/apis/batch/v1/namespaces/ns/jobs", {"watch": "true"})["verb"]
    'watch'
    """
    method = method.upper()
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return {"verb": method.lower(), "nonResourceURL": "/" + "/".join(parts)}
    namespace = ""
    # /namespaces/{ns}/{resource}... is namespaced, but /namespaces/{name}/status|finalize is
    # the Namespace object's own subresource
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    if resource == "namespaces" and name:
        namespace = name  # RBAC checks a Namespace's own verbs in that namespace
    watching = str((query or {}).get("watch", "")).lower() in ("true", "1")
    if method == "GET":
        verb = "watch" if watching else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    attrs = {"verb": verb, "group": group, "version": version, "resource": resource,
             "subresource": "/".join(rest[2:]), "name": name, "namespace": namespace}
    return {k: v for k, v in attrs.items() if v or k in ("verb", "group", "resource")}


def describe_resource(attrs: dict[str, str]) -> str:
    """`jobs.batch`, `pods/log`, `namespaces "t-1"` or the URL: how kubectl and RBAC name it."""
    if "nonResourceURL" in attrs:
        return attrs["nonResourceURL"]
    text = attrs.get("resource", "") + (f".{attrs['group']}" if attrs.get("group") else "")
    if attrs.get("subresource"):
        text = f"{attrs.get('resource', '')}/{attrs['subresource']}" + (
            f".{attrs['group']}" if attrs.get("group") else "")
    if attrs.get("name"):
        text += f" {attrs['name']!r}"
    return text
