"""The workloads the real-node tests run, and what each test needs around them: a volume
(a PVC of the local-path provisioner), a script in a ConfigMap, the files a job left on its
volume (read from the host: the provisioner's volumes are folders of this machine)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from dlc_airflow.k8s.kinds import ResourceKind

PVC = ResourceKind("v1", "PersistentVolumeClaim", "persistentvolumeclaims")
PV = ResourceKind("v1", "PersistentVolume", "persistentvolumes", namespaced=False)

# torchrun over gloo: every rank checks the all_reduce of (rank + 1) against the sum it must be,
# reports it through the runtime helper, and rank 0 saves a checkpoint on the volume.
DDP = '''
import os, socket
import torch
import torch.distributed as dist
from dlc_airflow.runtime import log_metrics, report_output, save_checkpoint

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
assert value.item() == expected, f"all_reduce gave {value.item()}, expected {expected}"
print(f"rank {rank}/{world} on {socket.gethostname()}: all_reduce {value.item():g} (master {os.environ['MASTER_ADDR']})", flush=True)
log_metrics(step=1, allreduce=value.item(), world_size=world)
report_output("rank_host_" + str(rank), socket.gethostname())
save_checkpoint(lambda folder: torch.save({"allreduce": value.item(), "world": world}, folder + "/model.pt"),
                step=1, directory=os.environ.get("CKPT", "/ckpt/ddp"))
dist.barrier()
dist.destroy_process_group()
'''


def create_pvc(admin, namespace: str, name: str = "work", size: str = "1Gi") -> str:
    admin.request("POST", PVC.path(namespace), body={
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                 "resources": {"requests": {"storage": size}}}})
    return name


def volume_folder(admin, namespace: str, claim: str, timeout: float = 60) -> Path:
    """The host folder behind a bound local-path claim."""
    deadline = time.monotonic() + timeout
    while True:
        pvc = admin.get(PVC, claim, namespace) or {}
        volume = pvc.get("spec", {}).get("volumeName")
        if volume:
            pv = admin.get(PV, volume) or {}
            source = pv.get("spec", {}).get("hostPath") or pv.get("spec", {}).get("local") or {}
            if source.get("path"):
                return Path(source["path"])
        assert time.monotonic() < deadline, f"claim {claim} not bound: {pvc.get('status')}"
        time.sleep(0.5)


def create_script(admin, namespace: str, source: str, filename: str = "main.py") -> str:
    name = f"script-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                  "data": {filename: source}}, namespace=namespace)
    return name
