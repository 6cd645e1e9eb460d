"""The environment each framework's users expect, for one replica: pure functions.

Every backend that runs replicas itself (native Jobs, JobSet, local processes) injects the
same variables, named as the Kubeflow operators name them, so a script moves between
backends unchanged. Hosts and ports come from an `Addressing` the backend supplies:
`<job>-<role>-<i>.<job>` on the native backend, 127.0.0.1 and free ports locally.

Variables that depend on the replica's index are returned as `IndexExpr`s: the local
backend evaluates them per process; the native backend turns them into a Downward API
reference to the Job's completion index (or a one-line shell prelude when the value is
offset or embedded, e.g. RANK of a worker after the master, or TF_CONFIG).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.spec.envsource import Source
from dlc_airflow.spec.models import DLCJob, hostfile_spec

# Every variable the wiring may set (by name or prefix). A replica's inherited environment
# loses these first (the local backend): a job started from inside another job's replica
# must not see its parent's rank or rendezvous.
WIRED_NAMES = frozenset(
    {
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "SHARD_INDEX", "SHARD_COUNT",
        "JOB_COMPLETION_INDEX", "WORKER_PORT", "WORKER_ADDRS", "RAY_HEAD_ADDRESS",
        "I_MPI_HYDRA_HOST_FILE", "K_MPI_JOB_ROLE",
    }
)
WIRED_PREFIXES = ("DLC_", "PET_", "OMPI_MCA_", "TORCHELASTIC_")


def is_wired(name: str) -> bool:
    """Whether the wiring owns the variable `name` (see WIRED_NAMES)."""
    return name in WIRED_NAMES or name.startswith(WIRED_PREFIXES)


@dataclass(frozen=True)
class IndexExpr:
    """A value that is `prefix + str(index + offset) + suffix` for the replica's index."""

    offset: int = 0
    prefix: str = ""
    suffix: str = ""

    def at(self, index: int) -> str:
        return f"{self.prefix}{index + self.offset}{self.suffix}"

    @property
    def is_plain_index(self) -> bool:
        return self.offset == 0 and not self.prefix and not self.suffix


@dataclass(frozen=True)
class Addressing:
    """How replica `index` of `role` is reached by its peers."""

    host: Callable[[str, int], str]
    port: Callable[[str, int], int]


def rank_offsets(job: DLCJob) -> dict[str, int]:
    """First global rank of each role (the coordinator role first)."""
    offsets, rank = {}, 0
    for role in ranked_roles(job):
        offsets[role] = rank
        rank += job.roles[role].replicas
    return offsets


def ranked_roles(job: DLCJob) -> list[str]:
    """Roles that take part in the rank space of torch/xgboost jobs."""
    return [r for r in ordered_roles(job.roles) if r in ("master", "worker")]


def coordinator(job: DLCJob) -> str:
    """The role whose replica 0 hosts the rendezvous."""
    for role in job.type_info.coordinator_roles:
        if role in job.roles:
            return role
    return ordered_roles(job.roles)[0]


def rendezvous_port(job: DLCJob) -> int | None:
    return job.port or job.type_info.port


def hostfile(job: DLCJob, addr: Addressing, slots: int) -> str:
    """MPI / DeepSpeed hostfile: one `<host> slots=N` line per worker (N: hostfile_spec's slots)."""
    workers = job.roles.get("worker")
    count = workers.replicas if workers else 0
    return "".join(f"{addr.host('worker', i)} slots={slots}\n" for i in range(count))


# A value of a replica's env: a string, an index-dependent value, or a source (a Secret's
# key becomes valueFrom in a pod spec; Airflow sources are resolved before anything runs).
PodValue = Union[str, "IndexExpr", Source]


def role_env(
    job: DLCJob, name: str, role: str, addr: Addressing | None, framework: bool = True,
) -> dict[str, PodValue]:
    """Every variable a replica of `role` gets, index-dependent ones as IndexExpr.

    `framework=False` leaves out the framework wiring (MASTER_ADDR, TF_CONFIG, hostfile env...)
    for backends whose operator injects it itself (Kubeflow, Trainer, KubeRay); `addr` is then
    not used and may be None. The user's env comes last, as the spec has it (references
    included: a Kubernetes pod turns them into Secret references, jobsecret.pod_env).
    """
    env: dict[str, PodValue] = dict(job.type_info.preset_env)
    env.update(
        {
            "DLC_JOB_NAME": name,
            "DLC_JOB_TYPE": job.type.value,
            "DLC_ROLE": role,
            "DLC_ROLE_REPLICAS": str(job.roles[role].replicas),
            "DLC_ROLE_INDEX": IndexExpr(),
        }
    )
    env.update(checkpoint_env(job))
    if framework:
        if addr is None:
            raise ValueError("role_env: framework wiring needs an Addressing")
        env.update(_framework_env(job, name, role, addr))
    # The user's env wins over ours: they may know better (e.g. a fixed MASTER_PORT).
    env.update(job.role_env(role))
    return env


def checkpoint_env(job: DLCJob) -> dict[str, str]:
    """What dlc_airflow.runtime reads about the job's checkpoint (every backend sets it)."""
    if not job.checkpoint:
        return {}
    env = {
        "DLC_CHECKPOINT_URI": job.checkpoint.uri,
        "DLC_CHECKPOINT_DIR": job.checkpoint.container_path() or "",
        "DLC_CHECKPOINT_KEEP": str(job.checkpoint.keep_last),
    }
    if job.checkpoint.resume_from:
        env["DLC_RESUME_FROM"] = job.checkpoint.resume_from
    return env


def replica_env(job: DLCJob, name: str, role: str, index: int, addr: Addressing) -> dict[str, str]:
    """The concrete env of replica `index` of `role` (what the local backend runs with: the
    job's secret values are in place already, dlc_airflow.secrets.resolve.with_values)."""
    out = {}
    for key, value in role_env(job, name, role, addr).items():
        if isinstance(value, IndexExpr):
            value = value.at(index)
        if not isinstance(value, str):
            raise ValueError(f"env {key}: {value.describe()} has no value here; it is resolved when the job is submitted")
        out[key] = value
    return out


def _framework_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    if job.type_info.torch:
        return _torch_env(job, name, role, addr)
    wiring = {
        JobType.tensorflow: _tensorflow_env,
        JobType.mpi: _mpi_env,
        JobType.xgboost: _xgboost_env,
        JobType.ray: _ray_env,
        JobType.batch: _batch_env,
    }.get(job.type)
    return wiring(job, name, role, addr) if wiring else {}


def _master(job: DLCJob, addr: Addressing) -> tuple[str, int]:
    lead = coordinator(job)
    return addr.host(lead, 0), addr.port(lead, 0)


def _torch_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    master_addr, master_port = _master(job, addr)
    nnodes = sum(job.roles[r].replicas for r in ranked_roles(job))
    rank = IndexExpr(offset=rank_offsets(job)[role])
    env: dict[str, str | IndexExpr] = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nnodes * job.nproc_per_node),
        "RANK": rank,
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
        "PET_NNODES": str(nnodes),
        "PET_NODE_RANK": rank,
        "PET_NPROC_PER_NODE": str(job.nproc_per_node),
    }
    if job.elastic:
        env.update(
            {
                "PET_NNODES": f"{job.elastic.min_replicas}:{job.elastic.max_replicas}",
                "PET_RDZV_BACKEND": "c10d",
                "PET_RDZV_ENDPOINT": f"{master_addr}:{master_port}",
                "PET_RDZV_ID": name,
                "PET_MAX_RESTARTS": str(job.elastic.max_restarts),
            }
        )
    if (hostfile := hostfile_spec(job)) is not None:  # deepspeed / megatron, launcher="mpi"
        env["DLC_HOSTFILE"] = hostfile.path
    return env


def _tensorflow_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    # The evaluator is not part of the cluster spec (as in Kubeflow's TFJob).
    cluster = {
        r: [f"{addr.host(r, i)}:{addr.port(r, i)}" for i in range(job.roles[r].replicas)]
        for r in ordered_roles(job.roles)
        if r != "evaluator"
    }
    head = json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}}, sort_keys=True)
    prefix, _, suffix = head.rpartition('"index": 0')
    return {"TF_CONFIG": IndexExpr(prefix=prefix + '"index": ', suffix=suffix)}


def _mpi_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    workers = job.roles["worker"].replicas
    hostfile = hostfile_spec(job)
    if hostfile is None:  # pragma: no cover - every mpi job has one
        raise ValueError("an mpi job without a hostfile")
    return {
        "OMPI_MCA_orte_default_hostfile": hostfile.path,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_set_default_slots": str(hostfile.slots),
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10 -o StrictHostKeyChecking=no",
        "I_MPI_HYDRA_HOST_FILE": hostfile.path,
        "K_MPI_JOB_ROLE": role,
        "DLC_HOSTFILE": hostfile.path,
        "WORLD_SIZE": str(workers * hostfile.slots),
    }


def _xgboost_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    master_addr, master_port = _master(job, addr)
    workers = job.roles.get("worker")
    worker_addrs = [addr.host("worker", i) for i in range(workers.replicas if workers else 0)]
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(sum(job.roles[r].replicas for r in ranked_roles(job))),
        "RANK": IndexExpr(offset=rank_offsets(job)[role]),
        "WORKER_PORT": str(master_port),
        "WORKER_ADDRS": ",".join(worker_addrs),
    }


def _ray_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    head, port = addr.host("head", 0), addr.port("head", 0)
    return {"RAY_HEAD_ADDRESS": f"{head}:{port}"}


def _batch_env(job: DLCJob, name: str, role: str, addr: Addressing) -> dict[str, str | IndexExpr]:
    return {
        "SHARD_INDEX": IndexExpr(),
        "SHARD_COUNT": str(job.roles[role].replicas),
    }
