"""GPUs on the real local Slurm: its nodes declare two each (`Gres=gpu:tesla:2`, device files
of scripts/slurm-local's own), so `resources.gpu` / `gpu_type` become a real GRES allocation
that each replica sees in its environment as it would on a GPU cluster; a request no node can
hold is refused at submit with what to check, and nothing is left behind."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest

from dlc_airflow.errors import SubmitError
from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.slurm.support import ENV_DUMP, envs, wait_all

pytestmark = pytest.mark.slurm_shapes


def gpu_job(gpus: int, gpu_type: str | None = "tesla") -> DLCJob:
    return DLCJob(image="not-used-on-slurm", type="pytorch", roles={"worker": 2}, command=[sys.executable, "-c", ENV_DUMP],
                  resources={"cpu": 1, "memory": "256Mi", "gpu": gpus, "gpu_type": gpu_type})


def identity() -> TaskIdentity:
    return TaskIdentity("slurm_gpus", "train", f"run-{uuid.uuid4().hex[:6]}")


@pytest.mark.parametrize("gpus, gpu_type, visible", [(1, "tesla", "0"), (2, "tesla", "0,1"), (2, None, "0,1")])
def test_each_replica_gets_the_gpus_it_asked_for(runner, slurm, job_root, gpus, gpu_type, visible):
    name = job_name("gpus", identity(), 1)
    ref, created = runner.submit(gpu_job(gpus, gpu_type), name, identity(), 1)
    assert created
    status = wait_all(runner, [ref], timeout=120)[ref.name]
    assert status.state is JobState.SUCCEEDED, status.summary()
    seen = envs(Path(job_root) / ref.name)
    assert sorted(seen) == ["worker-0", "worker-1"]
    nodes = set()
    for env in seen.values():
        # what Slurm's gres/gpu plugin gives a step on a GPU node
        assert env["CUDA_VISIBLE_DEVICES"] == visible and env["GPU_DEVICE_ORDINAL"] == visible, env
        assert env["SLURM_GPUS_ON_NODE"] == str(gpus)
        nodes.add(env["SLURMD_NODENAME"])
    assert len(nodes) == 2  # a node each
    # slurmctld's record of the job: the GPUs per node, with their type when one was asked for
    shown = slurm.scontrol("show", "job", ref.uid).stdout
    # (22.05 shows gres:gpu, 24.11 gres/gpu)
    assert re.search(rf"TresPerNode=gres[:/]gpu:{gpu_type + ':' if gpu_type else ''}{gpus}\n", shown), shown


def test_more_gpus_than_a_node_has_is_refused_at_submit(runner, job_root):
    name = job_name("gpus", identity(), 1)
    with pytest.raises(SubmitError, match=r"refused job .*Requested node configuration is not available.*: no 2 "
                                          r"nodes of the partition .*resources\.cpu / memory / gpu\)$"):
        runner.submit(gpu_job(3), name, identity(), 1)
    assert not (Path(job_root) / name).exists()  # no job folder left behind
    # slurmctld keeps the refused request as a record that already failed: nothing runs or waits
    assert {(j.state, j.reason) for j in runner.rest.jobs() if j.name == name} <= {("FAILED", "BadConstraints")}
