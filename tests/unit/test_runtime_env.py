"""dlc_airflow.runtime.env against the env dlc_airflow.wiring really produces."""

from __future__ import annotations

import json

import pytest

from dlc_airflow import wiring
from dlc_airflow.runtime import env as rt
from dlc_airflow.runtime.env import RuntimeEnvError
from dlc_airflow.spec import DLCJob

WIRED = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "PET_NODE_RANK", "PET_NNODES",
    "PET_NPROC_PER_NODE", "DLC_JOB_NAME", "DLC_JOB_TYPE", "DLC_ROLE", "DLC_ROLE_INDEX",
    "DLC_ROLE_REPLICAS", "SHARD_INDEX", "SHARD_COUNT", "JOB_COMPLETION_INDEX", "TF_CONFIG",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in WIRED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def use_replica(monkeypatch, job: DLCJob, role: str, index: int) -> None:
    addr = wiring.Addressing(host=lambda r, i: f"{r}-{i}.svc", port=lambda r, i: 1000 + i)
    for key, value in wiring.replica_env(job, "job-1", role, index, addr).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", str(index))


def test_outside_a_job_is_a_single_process():
    assert (rt.rank(), rt.world_size(), rt.local_rank(), rt.node_rank()) == (0, 1, 0, 0)
    assert rt.shard() == (0, 1) and rt.role_index() == 0
    assert rt.is_coordinator() and not rt.in_job()
    with pytest.raises(RuntimeEnvError, match="DLC_ROLE is not set"):
        rt.role()


def test_pytorch_replicas(clean_env):
    job = DLCJob(image="i", type="pytorch", command=["x"], roles={"master": 1, "worker": 3})
    use_replica(clean_env, job, "worker", 2)
    assert (rt.rank(), rt.world_size(), rt.node_rank(), rt.local_rank()) == (3, 4, 3, 0)
    assert (rt.role(), rt.role_index()) == ("worker", 2)
    assert not rt.is_coordinator()
    use_replica(clean_env, job, "master", 0)
    assert rt.rank() == 0 and rt.is_coordinator()


def test_batch_shards_and_coordinator(clean_env):
    job = DLCJob(image="i", type="batch", command=["x"], roles={"worker": 4})
    use_replica(clean_env, job, "worker", 3)
    assert rt.shard() == (3, 4) and not rt.is_coordinator()
    with pytest.raises(RuntimeEnvError, match="a batch job has no global rank"):
        rt.rank()
    use_replica(clean_env, job, "worker", 0)
    assert rt.is_coordinator()


def test_shard_falls_back_to_job_completion_index(clean_env):
    job = DLCJob(image="i", type="custom", command=["x"], roles={"indexer": 5})
    use_replica(clean_env, job, "indexer", 2)
    clean_env.delenv("DLC_ROLE_INDEX")
    assert rt.shard() == (2, 5) and rt.role_index() == 2


def test_tensorflow_and_mpi_coordinators(clean_env):
    tf = DLCJob(image="i", type="tensorflow", command=["x"], roles={"chief": 1, "worker": 2})
    use_replica(clean_env, tf, "worker", 0)
    assert json.loads(rt.os.environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}
    assert not rt.is_coordinator()  # the chief leads when there is one
    use_replica(clean_env, tf, "chief", 0)
    assert rt.is_coordinator()
    for name in WIRED:
        clean_env.delenv(name, raising=False)
    mpi = DLCJob(image="i", type="mpi", command=["x"], roles={"launcher": 1, "worker": 2})
    use_replica(clean_env, mpi, "worker", 0)
    clean_env.delenv("WORLD_SIZE")  # mpi sets WORLD_SIZE without RANK: the launcher leads
    assert not rt.is_coordinator()
    use_replica(clean_env, mpi, "launcher", 0)
    clean_env.delenv("WORLD_SIZE")
    assert rt.is_coordinator()


@pytest.mark.parametrize(
    "env, call, message",
    [
        ({"RANK": "4", "WORLD_SIZE": "4"}, rt.rank, "RANK=4 must be smaller than WORLD_SIZE=4"),
        ({"RANK": "1"}, rt.world_size, "RANK=1 is set but WORLD_SIZE is not"),
        ({"WORLD_SIZE": "2"}, rt.rank, "WORLD_SIZE=2 is set but RANK is not"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, rt.rank, "RANK='x' is not an integer"),
        ({"PET_NPROC_PER_NODE": "4"}, rt.local_rank, "start the script with torchrun"),
        ({"SHARD_INDEX": "3", "SHARD_COUNT": "3"}, rt.shard, "SHARD_INDEX=3 must be smaller than SHARD_COUNT=3"),
        ({"SHARD_COUNT": "3"}, rt.shard, "SHARD_COUNT=3 is set but SHARD_INDEX is not"),
        ({"DLC_ROLE_INDEX": "2", "DLC_ROLE_REPLICAS": "2"}, rt.role_index, "must be smaller than DLC_ROLE_REPLICAS=2"),
        ({"PET_NODE_RANK": "2", "PET_NNODES": "2"}, rt.node_rank, "PET_NODE_RANK=2 must be smaller than PET_NNODES=2"),
        ({"DLC_JOB_NAME": "j", "DLC_JOB_TYPE": "custom"}, rt.node_rank, "PET_NODE_RANK is not set"),
        ({"TF_CONFIG": "{not json", "DLC_JOB_NAME": "j"}, rt.is_coordinator, "TF_CONFIG is not valid"),
    ],
)
def test_inconsistent_or_missing_env_names_the_variable(clean_env, env, call, message):
    for key, value in env.items():
        clean_env.setenv(key, value)
    with pytest.raises(RuntimeEnvError, match=message.replace("(", r"\(").replace("[", r"\[")):
        call()


def test_torchrun_local_rank(clean_env):
    clean_env.setenv("PET_NPROC_PER_NODE", "4")
    clean_env.setenv("LOCAL_RANK", "3")
    assert rt.local_rank() == 3
    clean_env.setenv("LOCAL_RANK", "4")
    with pytest.raises(RuntimeEnvError, match="LOCAL_RANK=4 must be smaller than PET_NPROC_PER_NODE=4"):
        rt.local_rank()


PIPELINE_ENV = ("DLC_STORAGE_URI", "DLC_STORAGE_DIR", "DLC_DATA_URI", "DLC_OUTPUT_URI", "DLC_MODEL_URI",
                "DLC_CHECKPOINT_DIR", "DLC_CHECKPOINT_URI", "DLC_RESUME_FROM", "DLC_OUTPUT_FILE")


def test_paths_come_back_as_pathlib_paths_uris_and_resume_path_as_str(clean_env, tmp_path):
    """The documented types of dlc_airflow.runtime (its module docstring)."""
    from pathlib import Path

    from dlc_airflow.runtime import checkpoint, pipeline

    for name in PIPELINE_ENV:
        clean_env.delenv(name, raising=False)
    clean_env.setenv("DLC_OUTPUT_FILE", str(tmp_path / "outputs.json"))
    mount = tmp_path / "mnt"
    clean_env.setenv("DLC_STORAGE_URI", "s3://ml/lineages")
    clean_env.setenv("DLC_STORAGE_DIR", str(mount))
    clean_env.setenv("DLC_DATA_URI", "s3://ml/lineages/digits/data/k")
    clean_env.setenv("DLC_OUTPUT_URI", "s3://ml/lineages/digits/predictions/k")
    clean_env.setenv("DLC_MODEL_URI", "s3://ml/lineages/digits/checkpoints/j/step-000003")
    assert pipeline.data_dir() == mount / "digits/data/k"
    assert pipeline.output_dir() == mount / "digits/predictions/k"
    assert pipeline.model_dir() / "model.pt" == mount / "digits/checkpoints/j/step-000003/model.pt"
    for value in (pipeline.data_dir(), pipeline.output_dir(), pipeline.model_dir(),
                  pipeline.local_path("s3://ml/lineages"), pipeline.local_path(tmp_path)):
        assert isinstance(value, Path)
    assert pipeline.local_path("s3://ml/lineages") == mount
    assert pipeline.local_path(tmp_path / "x") == pipeline.local_path(f"file://{tmp_path}/x") == tmp_path / "x"
    assert isinstance(pipeline.output_uri(), str) and pipeline.output_uri().startswith("s3://")
    with pytest.raises(RuntimeEnvError, match="not a local path"):
        pipeline.local_path(Path("relative/x"))

    root = tmp_path / "ckpt"
    clean_env.setenv("DLC_CHECKPOINT_DIR", str(root))
    seen = []
    written = checkpoint.save_checkpoint(lambda folder: seen.append(folder), 3, report=False)
    assert isinstance(seen[0], str)  # write_fn gets a str (torch.save and friends take one)
    assert written == root / "step-000003" and isinstance(written, Path)
    assert checkpoint.checkpoint_dir() == checkpoint.checkpoint_dir(f"file://{root}") == root
    assert checkpoint.latest_checkpoint() == written
    assert checkpoint.list_checkpoints(root) == [(3, written)]
    clean_env.setenv("DLC_RESUME_FROM", str(written))
    assert checkpoint.resume_path(report=False) == str(written)  # a str, documented
