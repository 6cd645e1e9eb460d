"""The local backend: every replica a local process with the env the cluster backends inject.

    from dlc_airflow.local import LocalRunner
    runner = LocalRunner()                      # $DLC_LOCAL_ROOT, $AIRFLOW_HOME/dlc-local-jobs, ~/.cache/...
    runner.submit(job, "train-1a2b3c-1", labels)
    runner.status("train-1a2b3c-1")             # JobStatus

See dlc_airflow.local.supervisor for how a job runs and dlc_airflow.local.jobdir for the
job folder. Imports are lazy: the supervisor starts without loading the runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlc_airflow.local.runner import LocalJobError, LocalRunner, default_root

__all__ = ["LocalJobError", "LocalRunner", "default_root"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dlc_airflow.local import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'dlc_airflow.local' has no attribute {name!r}")
