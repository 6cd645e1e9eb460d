"""Real distributed training through srun: 2 PyTorch DDP processes over gloo, one per Slurm
node, rendezvousing at the MASTER_ADDR / MASTER_PORT the prelude derived from SLURM_*. The
job runs the venv's python: its folder is first on the job's PATH (`python` in the command)."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.slurm.support import wait_all

torch = pytest.importorskip("torch")

TRAIN = textwrap.dedent("""
    import json, os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dlc_airflow.runtime import log_metrics

    dist.init_process_group("gloo", init_method="env://")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data shard
    for step in range(5):
        x = torch.randn(8, 4, generator=gen)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    weights = [round(float(w), 6) for w in model.module.weight.flatten()]
    with open(f"ddp-{rank}.json", "w") as out:
        json.dump({"rank": rank, "world": world, "sum": float(total), "weights": weights,
                   "node": os.environ["SLURMD_NODENAME"]}, out)
    if rank == 0:
        log_metrics(step=5, loss=float(loss), world=world)
    dist.destroy_process_group()
""")


def test_pytorch_ddp_over_gloo_through_srun(runner, job_root):
    job = DLCJob(type="pytorch", image="unused", roles={"worker": 2}, command=["python", "-c", TRAIN],
                 resources={"cpu": 1, "memory": "1Gi"}, max_running_time="5m")
    identity = TaskIdentity("slurm_ddp", "train", f"run-{uuid.uuid4().hex[:6]}")
    ref, _ = runner.submit(job, job_name("ddp", identity, 1), identity, 1)
    status = wait_all(runner, [ref], timeout=180)[ref.name]
    lines = [f"[{r}] {line}" for r, line in runner.logs(ref)[0]]
    assert status.state is JobState.SUCCEEDED, (status.summary(), lines[-20:])
    jobdir = Path(job_root) / ref.name
    results = [json.loads((jobdir / f"ddp-{rank}.json").read_text()) for rank in range(2)]
    assert [r["world"] for r in results] == [2, 2]
    assert [r["sum"] for r in results] == [3.0, 3.0]  # 1 + 2, all-reduced over gloo
    assert results[0]["weights"] == results[1]["weights"]  # gradients were synchronised every step
    assert results[0]["node"] != results[1]["node"]  # one process per Slurm node
    assert runner.outputs(ref)["metrics"]["world"] == 2  # the coordinator's report, as XCom gets it
