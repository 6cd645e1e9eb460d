"""The digits retraining pipeline shared by the reference DAGs (dags/*.py).

Three DLC jobs whose code is in retraining/jobs/ (they use dlc_airflow.runtime):
preprocess (batch, 2 shards) -> train (PyTorch DDP, 2 workers over gloo on CPU) ->
inference (batch, 2 shards). The specs name the runtime image (docker/runtime.Dockerfile),
which a cluster runs; the local backend runs the same commands as local processes.

Both the code folder and the storage root are host_path mounts at their own paths: on the
local backend they are the folders themselves; on a cluster, the nodes must see them at the
same paths (a single-node cluster, or a shared volume mounted there) - or swap the code mount
for `code=` (a git checkout) and the storage root for s3:// with `mount_path`.

On a cluster, two settings place the jobs (`make demo-cluster` sets both for the local
cluster's real node):
- DLC_STORAGE_CLAIM: a PersistentVolumeClaim holding the storage root, mounted at the root's
  path in every job (the checkpoints each interval resumes from live there);
- DLC_SCHEDULING: the spec's `scheduling` section as JSON (node selector, tolerations...).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from dlc_airflow.spec import DLCJob

CODE = Path(__file__).resolve().parent
CODE_MOUNT = "/workspace/retraining"
IMAGE = os.environ.get("DLC_RUNTIME_IMAGE", "dlc-airflow/runtime:dev")
START = datetime(2026, 1, 1, tzinfo=UTC)


def storage_root() -> str:
    """$DLC_LINEAGE_ROOT, else <AIRFLOW_HOME>/dlc-lineage (file://)."""
    if os.environ.get("DLC_LINEAGE_ROOT"):
        return os.environ["DLC_LINEAGE_ROOT"]
    home = Path(os.environ.get("AIRFLOW_HOME", Path.home() / "airflow"))
    return f"file://{home.resolve() / 'dlc-lineage'}"


def _mounts(root: str) -> list[dict]:
    mounts = [{"type": "host_path", "mount_path": CODE_MOUNT, "path": str(CODE), "read_only": True}]
    if root.startswith("file://"):
        path = root[len("file://"):]
        claim = os.environ.get("DLC_STORAGE_CLAIM")
        mounts.append({"type": "pvc", "mount_path": path, "claim_name": claim} if claim
                      else {"type": "host_path", "mount_path": path, "path": path})
    return mounts


def digits_jobs(root: str | None = None, *, epochs: int = 12, lr: float = 0.05) -> dict[str, DLCJob]:
    """The three jobs of the pipeline (keys: preprocess, train, inference)."""
    storage = _mounts(root or storage_root())
    common = dict(image=IMAGE, storage=storage, max_running_time="15m",
                  resources={"cpu": "1", "memory": "1Gi"},
                  scheduling=json.loads(os.environ.get("DLC_SCHEDULING") or "{}"))

    def command(script: str) -> list[str]:
        return ["python", f"{CODE_MOUNT}/jobs/{script}"]

    return {
        "preprocess": DLCJob(name="preprocess", type="batch", roles={"worker": 2}, command=command("preprocess.py"),
                             **common),
        "train": DLCJob(name="train", type="pytorch", roles={"worker": 2}, command=command("train.py"),
                        env={"EPOCHS": str(epochs), "LR": str(lr), "OMP_NUM_THREADS": "1"},
                        fault_tolerance={"max_restarts": 1}, **common),
        "inference": DLCJob(name="inference", type="batch", roles={"worker": 2}, command=command("infer.py"),
                            **common),
    }
