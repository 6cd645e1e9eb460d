"""`make demo-cluster`: the demo's retraining chain in pods on the local cluster's real node.

What `python -m dlc_airflow.demo --cluster` needs around the DAG (dags/retraining_digits_cluster.py,
backend "native"): the local cluster (scripts/k8s-local up, with its real node and the runtime
image), a namespace `dlc-demo` where dlc-airflow's ServiceAccount holds its Role, and the
storage root as a PersistentVolume over the demo's own lineage folder, claimed in that
namespace: every job mounts the claim at the root's path, so checkpoints written by the
training pods of one interval are where the next interval resumes from, and the Airflow
tasks on this host read the same files (the lineage manifest, the predictions).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest

NAMESPACE = "dlc-demo"
CLAIM = "lineage"
STATE = Path(os.environ.get("DLC_K8S_STATE") or Path.home() / ".cache" / "dlc-airflow" / "cluster")
IMAGES = Path(os.environ.get("DLC_IMAGES_STATE") or Path.home() / ".cache" / "dlc-airflow" / "images")
# the real node's label and taint (scripts/k8s-node): kwok's simulated nodes run no containers
PLACEMENT = {"node_selector": {"dlc-airflow/node": "real"},
             "tolerations": [{"key": "dlc-airflow/real-node", "operator": "Exists", "effect": "NoSchedule"}]}


def _admin() -> Any:
    from dlc_airflow.k8s.client import KubeClient

    config = STATE / "admin.kubeconfig"
    if not config.is_file():
        raise SystemExit(f"demo-cluster: no local cluster ({config} is missing): run `make cluster` "
                         "(scripts/k8s-local up) first")
    return KubeClient.from_kubeconfig(str(config))


def _runtime_image() -> str:
    refs = IMAGES / "refs.env"
    found = dict(line.split("=", 1) for line in refs.read_text().split() if "=" in line) if refs.is_file() else {}
    if "DLC_RUNTIME_IMAGE" not in found:
        raise SystemExit(f"demo-cluster: no runtime image ({refs} names none): `make cluster` builds it "
                         "(scripts/k8s-images)")
    return found["DLC_RUNTIME_IMAGE"]


def _post(admin: Any, path: str, body: Manifest) -> None:
    from dlc_airflow.k8s.errors import Conflict

    try:
        admin.request("POST", path, body=body)
    except Conflict:
        pass


def _fresh_namespace(admin: Any) -> None:
    from dlc_airflow.k8s.kinds import NAMESPACE as NS

    if admin.get(NS, NAMESPACE) is not None:
        admin.delete(NS, NAMESPACE)
        deadline = time.monotonic() + 180
        while admin.get(NS, NAMESPACE) is not None:
            if time.monotonic() > deadline:
                raise SystemExit(f"demo-cluster: namespace {NAMESPACE} is still being deleted after 3 min")
            time.sleep(1)
    _post(admin, NS.path(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    _post(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dlc-airflow"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dlc-airflow-job-runner"},
        "subjects": [{"kind": "ServiceAccount", "name": "dlc-airflow", "namespace": "dlc-system"}]})


def _storage(admin: Any, folder: Path) -> None:
    """A PersistentVolume over `folder` (this host is the node), bound to the claim."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)  # the jobs run as the image's user (uid 1000)
    volume = f"{NAMESPACE}-{CLAIM}"
    _delete_volume(admin, volume)  # a volume of an earlier demo is Released, never bound again
    _post(admin, "/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder), "type": "Directory"},
                 "claimRef": {"namespace": NAMESPACE, "name": CLAIM}}})
    _post(admin, f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}}})


def _delete_volume(admin: Any, name: str) -> None:
    from dlc_airflow.k8s.kinds import ResourceKind

    kind = ResourceKind("v1", "PersistentVolume", "persistentvolumes", namespaced=False)
    if admin.get(kind, name) is None:
        return
    admin.delete(kind, name)
    deadline = time.monotonic() + 60
    while admin.get(kind, name) is not None and time.monotonic() < deadline:
        time.sleep(0.5)


def prepare(out: Path) -> None:
    """Namespace, volume and connection; the environment the cluster DAG reads."""
    admin = _admin()
    image = _runtime_image()
    from dlc_airflow.k8s.kinds import NODE

    if admin.get(NODE, "real-node") is None:
        raise SystemExit("demo-cluster: the local cluster has no real node (DLC_K8S_REAL_NODE=0?): "
                         "run scripts/k8s-local down && scripts/k8s-local up")
    print(f"demo: namespace {NAMESPACE} on the local cluster, storage root on a PersistentVolume over "
          f"{out / 'lineage'}", flush=True)
    _fresh_namespace(admin)
    _storage(admin, out / "lineage")
    # the pods run as the image's user (uid 1000) and write into folders this process makes
    # (the lineage steps run here, as you): make them writable for it (the demo's own folder)
    os.umask(0)
    os.environ.update({
        "DLC_RUNTIME_IMAGE": image,
        "DLC_STORAGE_CLAIM": CLAIM,
        "DLC_SCHEDULING": json.dumps(PLACEMENT),
        # the connection the DAG names: dlc-airflow's ServiceAccount (k8s/rbac/role.yaml), not the admin
        "AIRFLOW_CONN_DLC_CLUSTER": json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(STATE / "restricted.kubeconfig"), "namespace": NAMESPACE}}),
    })


def epochs(job_name: str) -> list[JSONObject]:
    """The per-epoch metric lines rank 0 printed, from its pod's log."""
    from dlc_airflow.k8s.kinds import POD
    from dlc_airflow.naming import LABEL_JOB
    from dlc_airflow.runtime.metrics import parse_metric_line

    admin = _admin()
    pods = admin.list(POD, NAMESPACE, labels={LABEL_JOB: job_name})[0]
    rank0 = sorted((p for p in pods if "-worker-0-" in p["metadata"]["name"]),
                   key=lambda p: p["metadata"]["creationTimestamp"])
    if not rank0:
        return []
    text = admin.read_log(rank0[-1]["metadata"]["name"], NAMESPACE)
    return [r for r in (parse_metric_line(line) for line in text.splitlines()) if r and "epoch" in r]
