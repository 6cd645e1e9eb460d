"""Job specs for the cluster tests: a minimal and a fully-featured one per job type, and the
type x backend matrix as the backends themselves answer it (`Backend.check`).

Test helper, not a test module.
"""

from __future__ import annotations

import uuid

from dlc_airflow import naming
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends import BACKENDS, get_backend
from dlc_airflow.k8s.client import FIELD_MANAGER, KubeClient
from dlc_airflow.k8s.errors import Conflict
from dlc_airflow.k8s.kinds import ResourceKind, kind_of
from dlc_airflow.spec import DLCJob

IMAGE = "registry.example.com/ml/train:2026.12"
# how long a pod runs before kwok completes it (k8s/cluster/pod-stages.yaml), as a job annotation
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
COMMAND = ["python", "-m", "train", "--epochs", "3"]
IDENTITY = naming.TaskIdentity("retrain_daily", "train", "scheduled__2026-12-01T00:00:00+00:00",
                               map_index=2, try_number=1)
JOB_TYPES = [t.value for t in JobType]
BACKEND_NAMES = list(BACKENDS)

# Cluster-wide and namespaced things the fully-featured specs refer to. The API server
# admits a Job whose pod template names a missing PriorityClass or ServiceAccount, but the
# Job controller's pods are then refused ("no PriorityClass with name ... was found"), so
# the tests create them (as an administrator would) to make "accepted" mean something.
PRIORITY_CLASS = "dlc-airflow-test-high"
SERVICE_ACCOUNT_NAME = "trainer"
PRIORITY_CLASS_KIND = ResourceKind("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False)
SERVICE_ACCOUNT_KIND = ResourceKind("v1", "ServiceAccount", "serviceaccounts")
CLUSTER_QUEUE = ResourceKind("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
ACCEPTANCE_QUEUE = "acceptance"  # the full specs' queue (test_backends_accepted.py)

# Roles of the fully-featured specs; Trainer v2 maps identical worker nodes only.
RICH_ROLES = {
    "pytorch": {"master": 1, "worker": 3},
    "deepspeed": {"worker": 2},
    "megatron": {"worker": 4},
    "tensorflow": {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1},
    "mpi": {"launcher": 1, "worker": 4},
    "xgboost": {"master": 1, "worker": 3},
    "ray": {"head": 1, "worker": 3},
    "batch": {"worker": 8},
    "custom": {"trainer": 2},
    "slurm": {"worker": 2},  # a Slurm batch script: every Kubernetes backend refuses it
}
TRAINER_ROLES = {"pytorch": {"worker": 3}, "deepspeed": {"worker": 2}, "megatron": {"worker": 4},
                 "mpi": {"launcher": 1, "worker": 4}}
TYPE_OPTIONS = {
    "pytorch": {"nproc_per_node": 4, "elastic": {"min_replicas": 2, "max_replicas": 4, "max_restarts": 2}},
    "deepspeed": {"launcher": "mpi", "nproc_per_node": 8},
    "megatron": {"nproc_per_node": 8, "port": 29400},
    "mpi": {"slots_per_worker": 8},
}

# Every storage kind; the PVC does not exist, so these pods stay Pending (fine for
# acceptance, not for running to completion).
STORAGE = [
    {"type": "pvc", "claim_name": "datasets", "mount_path": "/data", "read_only": True},
    {"type": "nfs", "server": "nas.example.com", "path": "/exports/ml", "mount_path": "/nas"},
    {"type": "csi", "driver": "ossplugin.csi.alibabacloud.com", "secret_name": "oss-credentials",
     "volume_attributes": {"bucket": "ml-checkpoints", "url": "oss-cn-hangzhou.aliyuncs.com"},
     "mount_path": "/oss"},
    {"type": "host_path", "path": "/mnt/nvme/cache", "mount_path": "/cache"},
    {"type": "config_map", "name": "train-config", "mount_path": "/etc/train"},
    {"type": "secret", "name": "api-keys", "mount_path": "/etc/keys", "read_only": True},
    {"type": "empty_dir", "size_limit": "20Gi", "mount_path": "/scratch", "sub_path": "run"},
]
FULL = dict(
    env={"LOG_LEVEL": "info", "HF_HOME": "/cache/hf"},
    storage=STORAGE,
    resources={"cpu": "16", "memory": "64Gi", "gpu": 2, "gpu_type": "NVIDIA-A100-SXM4-80GB",
               "shared_memory": "16Gi", "rdma": 1, "ephemeral_storage": "100Gi"},
    scheduling={"queue": "acceptance", "priority_class": PRIORITY_CLASS, "spot": "prefer",
                "include_nodes": ["gpu-a100-0", "gpu-a100-1", "gpu-spot-0"], "exclude_nodes": ["gpu-h100-0"],
                "node_selector": {"topology.kubernetes.io/zone": "zone-a"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "service_account": SERVICE_ACCOUNT_NAME},
    checkpoint={"uri": "oss://ml-checkpoints/retrain", "path": "/oss/retrain", "resume_from": "latest",
                "keep_last": 5},
    max_running_time="6h",
    ttl_after_finished="2d",
    labels={"team": "ml-platform", "cost-center": "r-and-d"},
    annotations={"owner": "ml-platform@example.com", "example.com/ticket": "ML-1234"},
)
# What TrainJob v1alpha1 cannot express (its check refuses these): not in its full spec.
NOT_ON_TRAINER = dict(
    code={"repo": "https://git.example.com/ml/train.git", "revision": "v1.4.2", "secret_name": "git-credentials"},
    health_check={"command": ["dlc-airflow", "sanity-check", "--gpus", "2"]},
    fault_tolerance={"max_restarts": 3, "retryable_exit_codes": [137, 143]},
)


def minimal(job_type: str) -> DLCJob:
    """The least a user writes: type, image, command (default roles)."""
    return DLCJob(type=job_type, image=IMAGE, command=list(COMMAND))


def full(job_type: str, backend: str) -> DLCJob:
    """Every feature the backend can express, for this type."""
    if backend == "trainer":
        roles = TRAINER_ROLES[job_type]
        options = {k: v for k, v in TYPE_OPTIONS.get(job_type, {}).items() if k != "elastic"}
        scheduling = {k: v for k, v in FULL["scheduling"].items() if k != "priority_class"}
        return DLCJob(type=job_type, image=IMAGE, command=list(COMMAND), roles=roles,
                      **{**FULL, "scheduling": scheduling}, **options)
    spec = FULL
    if backend == "native" and len(RICH_ROLES[job_type]) > 1:
        # refused: Kueue would admit each role's Job on its own
        spec = {**FULL, "scheduling": {k: v for k, v in FULL["scheduling"].items() if k != "queue"}}
    return DLCJob(type=job_type, image=IMAGE, command=list(COMMAND), roles=RICH_ROLES[job_type],
                  **spec, **NOT_ON_TRAINER, **TYPE_OPTIONS.get(job_type, {}))


def supports(backend: str, job_type: str) -> bool:
    """What the backend's own check says about the type (on the minimal spec)."""
    try:
        get_backend(backend).check(minimal(job_type))
        return True
    except BackendError:
        return False


SUPPORTED = [(t, b) for b in BACKEND_NAMES for t in JOB_TYPES if supports(b, t)]
UNSUPPORTED = [(t, b) for b in BACKEND_NAMES for t in JOB_TYPES if not supports(b, t)]


def unique_name(prefix: str) -> str:
    """A job name (DNS-1035, <= naming.MAX_BASE_NAME) unique across test runs."""
    return naming.slug(prefix, naming.MAX_BASE_NAME - 7) + "-" + uuid.uuid4().hex[:6]


def ensure_priority_class(admin: KubeClient) -> None:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS, "labels": {"dlc-airflow/test": "true"}},
            "value": 1000, "globalDefault": False, "description": "dlc-airflow cluster tests"}
    try:
        admin.request("POST", PRIORITY_CLASS_KIND.path(), body=body)
    except Conflict:
        pass


def ensure_cluster_queue(admin: KubeClient, name: str) -> None:
    """A Kueue ClusterQueue outside the teams' cohort with room for any test job, on both flavors."""
    big = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "100k"), ("memory", "100Ti"), ("nvidia.com/gpu", "10k"))]
    body = {"apiVersion": CLUSTER_QUEUE.api_version, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": "on-demand", "resources": big}, {"name": "spot", "resources": big}]}]}}
    try:
        admin.request("POST", CLUSTER_QUEUE.path(), body=body)
    except Conflict:
        pass


def ensure_service_account(admin: KubeClient, namespace: str) -> None:
    body = {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT_NAME, "namespace": namespace}}
    try:
        admin.request("POST", SERVICE_ACCOUNT_KIND.path(namespace), body=body)
    except Conflict:
        pass


def pod_templates(obj: dict) -> list[tuple[str, dict]]:
    """(role, pod template) of every complete pod template inside a rendered manifest.

    TrainJob runtime patches are partial templates (the runtime adds image and command):
    not returned.
    """
    spec, kind = obj.get("spec") or {}, obj["kind"]
    if kind == "Job":
        found = [spec["template"]]
    elif kind == "JobSet":
        found = [rj["template"]["spec"]["template"] for rj in spec["replicatedJobs"]]
    elif kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob"):
        field = next(k for k in spec if k.endswith("ReplicaSpecs"))
        found = [r["template"] for r in spec[field].values()]
    elif kind == "RayJob":
        cluster = spec["rayClusterSpec"]
        found = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster.get("workerGroupSpecs", [])]
    else:
        found = []
    return [(t["metadata"]["labels"][naming.LABEL_ROLE], t) for t in found]


def dry_run_strict(client, obj: dict) -> None:
    """POST with dryRun=All and fieldValidation=Strict: unknown or duplicate fields are errors."""
    query = {"fieldManager": FIELD_MANAGER, "dryRun": "All", "fieldValidation": "Strict"}
    client.request("POST", kind_of(obj).path(client.namespace), body=obj, query=query)


def missing_fields(sent, stored, path: str = "") -> list[str]:
    """Paths of what we sent that the server's copy lacks or changed (it may add defaults)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [p for k, v in sent.items() for p in missing_fields(v, stored.get(k, _ABSENT), f"{path}.{k}")]
    if isinstance(sent, list):
        if isinstance(stored, list) and (key := _list_map_key(sent)):
            # a list-map: the server may add entries of other managers (e.g. Kueue's runtimePatches)
            by_key = {item.get(key): item for item in stored if isinstance(item, dict)}
            return [p for item in sent for p in missing_fields(item, by_key.get(item[key], _ABSENT),
                                                               f"{path}[{key}={item[key]}]")]
        if not isinstance(stored, list) or len(sent) != len(stored):
            return [path]
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=False)) for p in missing_fields(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


_ABSENT = object()


def _list_map_key(items: list) -> str | None:
    """The key of a list of objects keyed by manager (runtimePatches), if it is one."""
    if items and all(isinstance(i, dict) and "manager" in i for i in items):
        return "manager"
    return None
