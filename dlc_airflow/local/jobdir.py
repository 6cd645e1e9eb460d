"""The local job folder: everything the local backend knows about one job, on disk (spec.json,
logs/ and outputs/ are the shared job folder's, dlc_airflow.jobfolder).

    <root>/<name>/
      spec.json         the DLCJob (DLCJob.to_dict())
      labels.json       the job's labels (dlc-airflow/task-key finds a task's job)
      annotations.json  the unabridged ids of the task that made it (dag, task, run, map index)
      state.json        the JobStatus, plus the supervisor's pid and each replica's (pid, phase,
                        restarts, exit code, when it began and ended); rewritten atomically
      supervisor.json   pid + start time of the detached supervisor (written at submit)
      supervisor.log    the supervisor's own output
      stop.json         a stop request: reason and grace period
      hostfile          MPI / DeepSpeed hostfile (mpi jobs, deepspeed with the mpi launcher)
      logs/<role>-<i>.log       stdout+stderr of each replica (health check, then main command)
      outputs/<role>-<i>.json   DLC_OUTPUT_FILE of each replica (dlc_airflow.runtime.metrics)
      volumes/          empty_dir mounts (they live and die with the job)
      code/             the code source checkout (job.code)
    <root>/volumes/<kind>-<name>/   pvc, nfs, csi, config_map and secret mounts, shared by jobs

State is only ever replaced whole (write a temp file, os.replace), so a reader never sees
half a file; a waiting task polls state.json.
"""

from __future__ import annotations

import re

LABELS = "labels.json"
ANNOTATIONS = "annotations.json"
STATE = "state.json"
SUPERVISOR = "supervisor.json"
SUPERVISOR_LOG = "supervisor.log"
STOP = "stop.json"
HOSTFILE = "hostfile"
VOLUMES = "volumes"
CODE = "code"

# A job name is a folder name: DNS-1123 subdomain characters, no '/' or '..'.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def check_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > 253 or not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"local job name {name!r} must be lowercase letters, digits, '-' and '.' "
            "(a DNS-1123 name), at most 253 characters"
        )
    if name == VOLUMES:
        raise ValueError(f"local job name {name!r} is reserved for the shared volume folders")


def replica_key(role: str, index: int) -> str:
    return f"{role}-{index}"
