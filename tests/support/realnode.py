"""The local cluster's real node (scripts/k8s-node): where containers really run.

Jobs meant for it select its label and tolerate its taint (kwok's simulated nodes keep every
other test's pods); they run the runtime image the node's `up` built and pushed
(scripts/k8s-images), whose reference is in the images' refs file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.cluster import REPO

NODE_NAME = "real-node"
NODE_LABEL = {"dlc-airflow/node": "real"}
NODE_TAINT = {"key": "dlc-airflow/real-node", "operator": "Exists", "effect": "NoSchedule"}
K8S_NODE = REPO / "scripts" / "k8s-node"
REFS = Path(os.environ.get("DLC_IMAGES_STATE") or Path.home() / ".cache" / "dlc-airflow" / "images") / "refs.env"


class NodeUnavailable(Exception):
    pass


def image_refs() -> dict[str, str]:
    if not REFS.is_file():
        raise NodeUnavailable(f"no images built ({REFS} is missing): scripts/k8s-local up builds them")
    return dict(line.split("=", 1) for line in REFS.read_text().split() if "=" in line)


def built_ref(variable: str, target: str) -> str:
    """The reference of an image scripts/k8s-images built (`target`), from the refs file."""
    ref = image_refs().get(variable)
    if not ref:
        raise NodeUnavailable(f"{REFS} names no {target} image: scripts/k8s-images {target} builds it")
    return ref


def runtime_image() -> str:
    return built_ref("DLC_RUNTIME_IMAGE", "runtime")


def frameworks_image() -> str:
    """The runtime image plus TensorFlow, XGBoost, DeepSpeed, Ray, Megatron Core and Open MPI."""
    return built_ref("DLC_FRAMEWORKS_IMAGE", "frameworks")


def airflow_image() -> str:
    """docker/airflow.Dockerfile: Airflow 3.3 with this provider (Airflow's components in pods)."""
    return built_ref("DLC_AIRFLOW_IMAGE", "airflow")


def postgres_image() -> str:
    """docker/postgres.Dockerfile: PostgreSQL from Debian's packages (the compose stack's database)."""
    return built_ref("DLC_POSTGRES_IMAGE", "postgres")


def check_node(admin) -> None:
    """The real node is registered and Ready (the kubelet heartbeats)."""
    from dlc_airflow.k8s.kinds import NODE

    node = admin.get(NODE, NODE_NAME)
    if node is None:
        raise NodeUnavailable(f"no node {NODE_NAME}: scripts/k8s-local up starts it (DLC_K8S_REAL_NODE=1, the default)")
    ready = [c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
    if not ready or ready[0]["status"] != "True":
        raise NodeUnavailable(f"node {NODE_NAME} is not Ready: {ready}")


def node_address(admin) -> str:
    """The node's InternalIP: its bridge's address, where pods reach services of this host."""
    from dlc_airflow.k8s.kinds import NODE

    node = admin.get(NODE, NODE_NAME) or {}
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def on_real_node(**spec: Any) -> dict[str, Any]:
    """A DLCJob spec (as a dict) placed on the real node, with the runtime image by default."""
    scheduling = dict(spec.pop("scheduling", {}) or {})
    scheduling["node_selector"] = {**NODE_LABEL, **scheduling.get("node_selector", {})}
    scheduling["tolerations"] = [*scheduling.get("tolerations", []), NODE_TAINT]
    return {"image": runtime_image(), **spec, "scheduling": scheduling}


def crictl(*args: str, timeout: float = 60) -> str:
    """crictl against the node's containerd (what really runs, not what the API says)."""
    done = subprocess.run([str(K8S_NODE), "crictl", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise AssertionError(f"crictl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout
