"""Job types: their roles, default ports and presets (the table in DESIGN.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from dlc_airflow.jsonvalue import JSONObject


class JobType(str, Enum):
    pytorch = "pytorch"
    deepspeed = "deepspeed"
    megatron = "megatron"
    tensorflow = "tensorflow"
    mpi = "mpi"
    xgboost = "xgboost"
    ray = "ray"
    batch = "batch"
    custom = "custom"
    slurm = "slurm"  # DLC's SlurmJob: the command is a batch script, run as it is


@dataclass(frozen=True)
class TypeInfo:
    # role -> most replicas (None: unbounded); None for "any single role" (custom)
    roles: dict[str, int | None] | None
    default_roles: dict[str, int]
    required_roles: tuple[str, ...] = ()
    one_of_roles: tuple[str, ...] = ()
    port: int | None = None
    torch: bool = False
    # role that hosts the rendezvous (rank 0), in order of preference
    coordinator_roles: tuple[str, ...] = ()
    # env every replica gets (framework presets)
    preset_env: dict[str, str] = field(default_factory=dict)


_TORCH_ROLES: dict[str, int | None] = {"master": 1, "worker": None}

JOB_TYPES: dict[JobType, TypeInfo] = {
    JobType.pytorch: TypeInfo(
        roles=_TORCH_ROLES,
        default_roles={"worker": 1},
        one_of_roles=("master", "worker"),
        port=23456,
        torch=True,
        coordinator_roles=("master", "worker"),
        preset_env={"PYTHONUNBUFFERED": "1"},
    ),
    JobType.deepspeed: TypeInfo(
        roles=_TORCH_ROLES,
        default_roles={"worker": 1},
        one_of_roles=("master", "worker"),
        port=23456,
        torch=True,
        coordinator_roles=("master", "worker"),
        preset_env={"PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "WARN", "NCCL_ASYNC_ERROR_HANDLING": "1"},
    ),
    JobType.megatron: TypeInfo(
        roles=_TORCH_ROLES,
        default_roles={"worker": 1},
        one_of_roles=("master", "worker"),
        port=23456,
        torch=True,
        coordinator_roles=("master", "worker"),
        # Megatron-LM's tensor parallel overlap requires a single CUDA connection.
        preset_env={
            "PYTHONUNBUFFERED": "1",
            "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "NCCL_DEBUG": "WARN",
            "NCCL_ASYNC_ERROR_HANDLING": "1",
        },
    ),
    JobType.tensorflow: TypeInfo(
        roles={"chief": 1, "ps": None, "worker": None, "evaluator": 1},
        default_roles={"worker": 1},
        one_of_roles=("chief", "worker"),
        port=2222,
        coordinator_roles=("chief", "worker"),
    ),
    JobType.mpi: TypeInfo(
        roles={"launcher": 1, "worker": None},
        default_roles={"launcher": 1, "worker": 1},
        required_roles=("launcher", "worker"),
        coordinator_roles=("launcher",),
    ),
    JobType.xgboost: TypeInfo(
        roles={"master": 1, "worker": None},
        default_roles={"worker": 1},
        one_of_roles=("master", "worker"),
        port=9999,
        coordinator_roles=("master", "worker"),
        preset_env={"PYTHONUNBUFFERED": "1"},
    ),
    JobType.ray: TypeInfo(
        roles={"head": 1, "worker": None},
        default_roles={"head": 1},
        required_roles=("head",),
        port=6379,
        coordinator_roles=("head",),
    ),
    JobType.batch: TypeInfo(
        roles={"worker": None},
        default_roles={"worker": 1},
        required_roles=("worker",),
        coordinator_roles=("worker",),
    ),
    JobType.custom: TypeInfo(
        roles=None,
        default_roles={"worker": 1},
    ),
    # worker replicas = nodes allocated to the script; it runs its own srun steps
    JobType.slurm: TypeInfo(
        roles={"worker": None},
        default_roles={"worker": 1},
        required_roles=("worker",),
        coordinator_roles=("worker",),
    ),
}

# Order roles are ranked in (rank 0 first) and created in.
ROLE_ORDER = ("master", "chief", "launcher", "head", "ps", "worker", "evaluator")


def ordered_roles(roles: JSONObject) -> list[str]:
    """Role names in rank order; unknown (custom) roles keep their given order at the end."""
    known = [r for r in ROLE_ORDER if r in roles]
    return known + [r for r in roles if r not in ROLE_ORDER]
