"""Helpers for code running inside a job's containers.

Stdlib only (torch is used when installed and never imported here): importing this package
in a training script costs nothing.

    from dlc_airflow.runtime import rank, world_size, shard, save_checkpoint, resume_path, log_metrics
    from dlc_airflow.runtime import log_progress  # log_progress(step, total_steps, loss=...): progress and ETA
    from dlc_airflow.runtime import pipeline   # inside a dlc_airflow.pipelines step: interval, URIs

Paths, in and out:
- Arguments that are paths take a `str` or any `os.PathLike` (a pathlib.Path); a file://
  URI is accepted where a local path is (checkpoint_dir, save_checkpoint's `directory`,
  pipeline.local_path).
- Local paths come back as `pathlib.Path`: checkpoint_dir(), latest_checkpoint(),
  list_checkpoints() (step, Path), save_checkpoint() (the checkpoint written, None off the
  coordinator), pipeline.local_path(), pipeline.data_dir() / output_dir() / model_dir().
- Two are `str` on purpose: resume_path() returns the checkpoint folder as a str (or None),
  ready for f"{start}/model.pt" and torch.load, and the `write_fn` save_checkpoint calls
  gets its folder as a str (what torch.save and most writers take). Wrap either in Path()
  for path arithmetic.
- URIs stay `str`: pipeline.data_uri() / output_uri() / model_uri(), and the outputs the
  checkpoint helpers report ("checkpoint": under DLC_CHECKPOINT_URI when the checkpoint root
  is its mount, else the local path; "resumed_from": DLC_RESUME_FROM as it was given).
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
    log_progress,
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
    "log_progress",
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
