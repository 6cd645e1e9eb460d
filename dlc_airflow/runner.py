"""The runner contract: the I/O half of a backend, the same calls on every backend.

A runner talks to one place jobs run (a Kubernetes namespace through one backend, or the
local job root). Everything above it - submit-or-adopt (submission.py), the waits (the
sync wait, the trigger, the sensor) and the steps after a verdict (finish.py) - is
written once against this protocol and never asks which backend it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from dlc_airflow.jobinfo import JobInfo, Replica
from dlc_airflow.jobref import JobRef
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.status import JobStatus

# (status, the replicas' objects as last seen: pods on Kubernetes, none locally)
OnStatus = Callable[[JobStatus, list[dict]], None]
LogLines = list[tuple[str, str]]  # (replica, line)


class Log(Protocol):
    """What the library logs through: a logging.Logger, or Airflow's task logger."""

    def debug(self, msg: Any, /, *args: Any) -> Any: ...

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def warning(self, msg: Any, /, *args: Any) -> Any: ...

    def error(self, msg: Any, /, *args: Any) -> Any: ...

    def log(self, level: int, msg: Any, /, *args: Any) -> Any: ...


class Follower(Protocol):
    """Reports a job's status changes to `on_status` until closed."""

    def start(self, on_status: OnStatus) -> None: ...

    def close(self) -> None: ...


class JobRunner(Protocol):
    backend_name: str
    namespace: str

    def ref(self, job: DLCJob, name: str, attempt: int = 1) -> JobRef:
        """Where job `name` lives (or would live) once submitted."""

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        """Every job this task instance made, oldest attempt first."""

    def lookup(self, name: str) -> JobRef | None:
        """The job called `name`, whoever made it (sensors, the CLI); None if there is none."""

    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        """Create the job, or complete and adopt this task's job of that name.

        Idempotent: every part of the job that is missing is created, every part that
        exists and is this task's is kept (a try killed half-way leaves a job the next try
        completes). Returns (ref, whether anything was created). Raises OwnershipError for
        another task's job, SubmitError when refused (after removing what it created).
        """

    def status(self, ref: JobRef) -> JobStatus: ...

    def follow(self, ref: JobRef) -> Follower: ...

    def logs(self, ref: JobRef, since: dict[str, Any] | None = None,
             pods: list[dict] | None = None) -> tuple[LogLines, dict[str, Any]]:
        """New log lines since the positions `since`, and the positions to pass next time."""

    def events(self, ref: JobRef, seen: set[str] | None = None) -> list[dict]:
        """The job's events not in `seen` (Kubernetes Events; none locally)."""

    def outputs(self, ref: JobRef, pods: list[dict] | None = None) -> dict[str, dict]:
        """{"metrics": {...}, "outputs": {...}} that the job reported (dlc_airflow.runtime)."""

    def settle(self, ref: JobRef) -> list[str]:
        """Once the job has finished: stop the parts still running; returns their names."""

    def stop(self, ref: JobRef) -> int:
        """Stop the job (nothing of it keeps running); returns how many parts were stopped."""

    def delete(self, ref: JobRef) -> None:
        """Remove the job and everything it made (on_finish='delete')."""

    def claim(self, ref: JobRef, try_number: int) -> None:
        """Record that task try `try_number` now owns the job (it submitted or adopted it)."""

    def owner_try(self, ref: JobRef) -> int | None:
        """The newest task try that claimed the job; None if it is gone or never claimed."""

    # -- for people: the job CLI and the report page -------------------------------------
    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        """Every dlc-airflow job of this backend here, oldest first; only those of one DAG,
        task or run when given (exact ids)."""

    def spec(self, ref: JobRef) -> dict[str, Any] | None:
        """The spec the job was submitted with (dlc_airflow.specpack: secrets as references);
        None when the job is gone or the backend keeps none."""

    def replicas(self, ref: JobRef) -> list[Replica]:
        """The job's replicas as last seen: the report's timeline."""


# -- optional capabilities: a runner implements them or not (isinstance tells) ----------------


@runtime_checkable
class SecretReader(Protocol):
    """Reads the values of the Secret sources a job's env names, where this identity may (to
    mask them in the logs): readable Kubernetes Secrets, the local backend's stand-ins."""

    def secret_values(self, refs: Sequence[SecretKeyRef], log: Log) -> list[str]: ...
