"""Read the env a dlc-airflow job gives each replica (see dlc_airflow.wiring).

Inside a job (DLC_JOB_NAME is set) a variable the job type injects must be there and be
consistent; a missing or contradictory one raises RuntimeEnvError naming the variable.
Outside a job (a script run by hand on a laptop) the helpers answer as for a single
process: rank 0 of 1, shard 0 of 1, the coordinator.
"""

from __future__ import annotations

import json
import os

__all__ = [
    "RuntimeEnvError",
    "in_job",
    "is_coordinator",
    "job_name",
    "job_type",
    "local_rank",
    "node_rank",
    "rank",
    "role",
    "role_index",
    "shard",
    "world_size",
]


class RuntimeEnvError(RuntimeError):
    """The job env is missing a variable or contradicts itself."""


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def _int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise RuntimeEnvError(f"{name}={value!r} is not an integer") from None
    if number < 0:
        raise RuntimeEnvError(f"{name}={value!r} must not be negative")
    return number


def in_job() -> bool:
    """True when running as a replica of a dlc-airflow job."""
    return _get("DLC_JOB_NAME") is not None


def job_name() -> str | None:
    return _get("DLC_JOB_NAME")


def job_type() -> str | None:
    return _get("DLC_JOB_TYPE")


def _rank_and_world() -> tuple[int, int]:
    raw_rank, raw_world = _get("RANK"), _get("WORLD_SIZE")
    if raw_rank is None and raw_world is None:
        if in_job():
            raise RuntimeEnvError(
                f"RANK and WORLD_SIZE are not set: a {job_type() or 'this'} job has no global "
                "rank (only pytorch, deepspeed, megatron and xgboost jobs do); "
                "use role_index() or shard()"
            )
        return 0, 1  # a single process outside any job
    if raw_rank is None:
        raise RuntimeEnvError(f"WORLD_SIZE={raw_world} is set but RANK is not; set both or neither")
    if raw_world is None:
        raise RuntimeEnvError(f"RANK={raw_rank} is set but WORLD_SIZE is not; set both or neither")
    r, w = _int("RANK", raw_rank), _int("WORLD_SIZE", raw_world)
    if w < 1:
        raise RuntimeEnvError(f"WORLD_SIZE={w} must be at least 1")
    if r >= w:
        raise RuntimeEnvError(f"RANK={r} must be smaller than WORLD_SIZE={w}")
    return r, w


def rank() -> int:
    """Global rank (RANK); 0 outside a job."""
    return _rank_and_world()[0]


def world_size() -> int:
    """Number of processes (WORLD_SIZE); 1 outside a job."""
    return _rank_and_world()[1]


def _nproc_per_node() -> int:
    raw = _get("PET_NPROC_PER_NODE")
    return _int("PET_NPROC_PER_NODE", raw) if raw is not None else 1


def local_rank() -> int:
    """Rank within this node (LOCAL_RANK, set by torchrun); 0 with one process per node."""
    raw = _get("LOCAL_RANK")
    if raw is not None:
        value = _int("LOCAL_RANK", raw)
        nproc = _nproc_per_node()
        if value >= nproc and _get("PET_NPROC_PER_NODE") is not None:
            raise RuntimeEnvError(f"LOCAL_RANK={value} must be smaller than PET_NPROC_PER_NODE={nproc}")
        return value
    nproc = _nproc_per_node()
    if nproc > 1:
        raise RuntimeEnvError(
            f"LOCAL_RANK is not set but PET_NPROC_PER_NODE={nproc}: start the script with torchrun, "
            "which sets LOCAL_RANK for each of the node's processes"
        )
    return 0


def node_rank() -> int:
    """Index of this node (pod) among the job's nodes: PET_NODE_RANK, or torchrun's GROUP_RANK."""
    for name in ("PET_NODE_RANK", "GROUP_RANK"):
        raw = _get(name)
        if raw is not None:
            value = _int(name, raw)
            nnodes = _get("PET_NNODES")
            if nnodes is not None and ":" not in nnodes and value >= _int("PET_NNODES", nnodes):
                raise RuntimeEnvError(f"{name}={value} must be smaller than PET_NNODES={nnodes}")
            return value
    if in_job():
        raise RuntimeEnvError(
            f"PET_NODE_RANK is not set: a {job_type() or 'this'} job has no node rank "
            "(only torch-type jobs do); use role_index()"
        )
    return 0


def role() -> str:
    """This replica's role (DLC_ROLE): master, worker, chief, ps, launcher, head..."""
    value = _get("DLC_ROLE")
    if value is None:
        raise RuntimeEnvError("DLC_ROLE is not set: this process is not a replica of a dlc-airflow job")
    return value


def role_index() -> int:
    """Index of this replica within its role (DLC_ROLE_INDEX, else JOB_COMPLETION_INDEX)."""
    for name in ("DLC_ROLE_INDEX", "JOB_COMPLETION_INDEX"):
        raw = _get(name)
        if raw is not None:
            value = _int(name, raw)
            replicas = _get("DLC_ROLE_REPLICAS")
            if replicas is not None and value >= _int("DLC_ROLE_REPLICAS", replicas):
                raise RuntimeEnvError(f"{name}={value} must be smaller than DLC_ROLE_REPLICAS={replicas}")
            return value
    if in_job():
        raise RuntimeEnvError("DLC_ROLE_INDEX and JOB_COMPLETION_INDEX are not set")
    return 0


def _tf_coordinator(tf_config: str) -> bool:
    try:
        config = json.loads(tf_config)
        task, cluster = config["task"], config.get("cluster", {})
        lead = "chief" if "chief" in cluster else "worker"
        return task["type"] == lead and int(task["index"]) == 0
    except (ValueError, KeyError, TypeError):
        raise RuntimeEnvError(f"TF_CONFIG is not valid: {tf_config[:200]!r}") from None


def is_coordinator() -> bool:
    """True for the one replica that writes shared results (checkpoints, reports).

    RANK 0 where there is a global rank; the chief (else worker 0) of a TensorFlow job;
    replica 0 of the type's coordinator role (launcher, head, worker...) otherwise;
    True outside a job.
    """
    if not in_job():
        return True
    if _get("RANK") is not None or _get("WORLD_SIZE") is not None:
        return rank() == 0
    tf_config = _get("TF_CONFIG")
    if tf_config is not None:
        return _tf_coordinator(tf_config)
    from dlc_airflow.jobtypes import JOB_TYPES, JobType

    try:
        leads = JOB_TYPES[JobType(job_type())].coordinator_roles
    except ValueError:
        leads = ()
    # custom jobs have one role: its replica 0 leads
    return role_index() == 0 and (not leads or role() == leads[0])


def shard() -> tuple[int, int]:
    """(index, count) of this replica's share of the data.

    SHARD_INDEX / SHARD_COUNT (batch jobs), else JOB_COMPLETION_INDEX (or DLC_ROLE_INDEX)
    of DLC_ROLE_REPLICAS; (0, 1) outside a job.
    """
    raw_index, raw_count = _get("SHARD_INDEX"), _get("SHARD_COUNT")
    if raw_index is None:
        raw_index = _get("JOB_COMPLETION_INDEX") or _get("DLC_ROLE_INDEX")
        name_index = "JOB_COMPLETION_INDEX"
    else:
        name_index = "SHARD_INDEX"
    name_count = "SHARD_COUNT"
    if raw_count is None:
        raw_count, name_count = _get("DLC_ROLE_REPLICAS"), "DLC_ROLE_REPLICAS"
    if raw_index is None and raw_count is None:
        if in_job():
            raise RuntimeEnvError("SHARD_INDEX/SHARD_COUNT and JOB_COMPLETION_INDEX are not set")
        return 0, 1
    if raw_index is None:
        raise RuntimeEnvError(f"{name_count}={raw_count} is set but SHARD_INDEX is not")
    if raw_count is None:
        raise RuntimeEnvError(f"{name_index}={raw_index} is set but SHARD_COUNT is not")
    index, count = _int(name_index, raw_index), _int(name_count, raw_count)
    if count < 1:
        raise RuntimeEnvError(f"{name_count}={count} must be at least 1")
    if index >= count:
        raise RuntimeEnvError(f"{name_index}={index} must be smaller than {name_count}={count}")
    return index, count
