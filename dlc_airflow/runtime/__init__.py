"""Helpers for code running inside a job's containers.

Stdlib only (torch is used when installed and never imported here): importing this package
in a training script costs nothing.

    from dlc_airflow.runtime import rank, world_size, shard, save_checkpoint, resume_path, log_metrics
"""

from dlc_airflow.runtime.checkpoint import (
    CheckpointError,
    checkpoint_dir,
    checkpoint_metadata,
    latest_checkpoint,
    list_checkpoints,
    resume_path,
    save_checkpoint,
)
from dlc_airflow.runtime.env import (
    RuntimeEnvError,
    in_job,
    is_coordinator,
    local_rank,
    node_rank,
    rank,
    role,
    role_index,
    shard,
    world_size,
)
from dlc_airflow.runtime.metrics import (
    log_metrics,
    parse_metric_line,
    parse_outputs,
    read_outputs,
    report_output,
)

__all__ = [
    "CheckpointError",
    "RuntimeEnvError",
    "checkpoint_dir",
    "checkpoint_metadata",
    "in_job",
    "is_coordinator",
    "latest_checkpoint",
    "list_checkpoints",
    "local_rank",
    "log_metrics",
    "node_rank",
    "parse_metric_line",
    "parse_outputs",
    "rank",
    "read_outputs",
    "report_output",
    "resume_path",
    "role",
    "role_index",
    "save_checkpoint",
    "shard",
    "world_size",
]
