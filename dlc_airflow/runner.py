"""The runner contract: the I/O half of a backend, the same calls and types on every backend.

A runner talks to one place jobs run (a Kubernetes namespace through one backend, a Slurm
cluster, a DLC workspace, the local job root). Everything above it - submit-or-adopt
(submission.py), the waits (the sync wait, the trigger, the sensor) and the steps after a
verdict (finish.py) - is written once against this protocol and never asks which backend
it has. Its types are the contract's own: a job is a JobRef, its replicas are Replicas, its
log lines LogLines, its events Events; what a backend reads them from stays in the backend.

`stop` and `delete` mean the same everywhere: stop ends the job (nothing of it runs on) and
keeps what there is to read (its objects, folder, record); delete stops it and removes it
and everything it made. tests/conformance holds every runner (and the FakeRunner the unit
tests use) to this contract.

What only some backends can do is an optional capability, a small Protocol a runner
implements or not (`isinstance(runner, EventSource)`): events, settling leftovers, the
stored spec, reading Secret values to mask them. There are no no-op methods.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypedDict, runtime_checkable

from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSON, JSONDict
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.status import JobStatus

# -- the contract's types ---------------------------------------------------------------------


@dataclass(frozen=True)
class Replica:
    """One replica (a pod, a local process, a Slurm task, a DLC pod) as last seen."""

    name: str  # <role>-<index>, as the task log prefixes its lines
    role: str
    index: int
    state: str  # Pending, Running, Succeeded, Failed (a pod's phase; the same words elsewhere)
    started: datetime | None = None
    finished: datetime | None = None
    exit_code: int | None = None
    reason: str = ""  # why it ended (OOMKilled, Error, preempted...)
    restarts: int = 0  # in place (a container restarted by the kubelet, a local process)
    node: str = ""
    uid: str = ""  # tells a replica's successive incarnations apart
    # why a running replica cannot be vouched for now, as the backend says ('' while it can):
    # a pod whose node stopped reporting. It may recover; the job's state decides the task.
    unwell: str = ""
    # backend-private: what the backend needs to read this replica again (a pod's name and
    # container, its termination message); nothing else reads it
    detail: Mapping[str, str] = field(default_factory=dict, hash=False)


class LogLine(NamedTuple):
    replica: str  # <role>-<index>
    text: str


LogPositions = JSONDict  # where a reader is in each replica's log: the backend's own, JSON


@dataclass(frozen=True)
class Event:
    """Something the backend noted about the job (a Kubernetes Event, a DLC job event)."""

    uid: str
    time: str  # sortable: RFC 3339, or the backend's own order
    object: str  # what it is about: "Job train-1-worker", "DLCJob train-1"
    reason: str
    message: str
    warning: bool = False
    count: int = 1
    # a controller could not create the job's replicas (a missing ServiceAccount, a quota):
    # a queued job that says so fails after its queue timeout with this message
    blocks_start: bool = False


class Outputs(TypedDict):
    """What a job reported through dlc_airflow.runtime (the coordinator's values win)."""

    metrics: dict[str, JSON]
    outputs: dict[str, JSON]


def merge_outputs(reports: Iterable[Mapping[str, object]]) -> Outputs:
    """One Outputs from the replicas' reports, given coordinator LAST (its values win)."""
    merged: Outputs = {"metrics": {}, "outputs": {}}
    for report in reports:
        for part in ("metrics", "outputs"):
            values = report.get(part)
            if isinstance(values, dict):
                merged[part].update(values)
    return merged


COORDINATOR_ROLES = frozenset({"master", "chief", "launcher", "head"})


def replica_order(replica: Replica) -> tuple[int, str, int]:
    """Coordinator replicas first (rank 0 is the first replica), then by role and index."""
    return (0 if replica.role in COORDINATOR_ROLES else 1, replica.role, replica.index)


def log_replica_order(replica: str) -> tuple[int, int, str]:
    """A LogLine's replica name (<role>-<index>) in the same order: whose reports count first."""
    role, _, index = replica.rpartition("-")
    return (0 if role in COORDINATOR_ROLES else 1, int(index) if index.isdigit() else 0, replica)


# (the job's status, and its replicas as last seen: [] where a backend does not watch them)
OnStatus = Callable[[JobStatus, Sequence[Replica]], None]


class Log(Protocol):
    """What the library logs through: a logging.Logger, or Airflow's task logger."""

    def debug(self, msg: object, /, *args: object) -> object: ...

    def info(self, msg: object, /, *args: object) -> object: ...

    def warning(self, msg: object, /, *args: object) -> object: ...

    def error(self, msg: object, /, *args: object) -> object: ...

    def log(self, level: int, msg: object, /, *args: object) -> object: ...


class Connection(Protocol):
    """What the backends read of an Airflow connection (airflow.sdk.Connection has all of it)."""

    @property
    def conn_type(self) -> str | None: ...

    @property
    def host(self) -> str | None: ...

    @property
    def port(self) -> int | None: ...

    @property
    def login(self) -> str | None: ...

    @property
    def password(self) -> str | None: ...

    @property
    def extra_dejson(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Reach:
    """How a runner reaches its jobs, whatever the backend (a registry entry's runner factory
    takes it): the Airflow connection (its id, the Connection when the caller has read it
    already, its extras), the place a task asked for (namespace=), the local job root."""

    conn_id: str
    place: str | None = None
    local_root: str | None = None
    connection: Connection | None = None  # None: read it (or there is no Airflow at all)
    extras: Mapping[str, Any] | None = None


# -- the runner ---------------------------------------------------------------------------


class Follower(Protocol):
    """Reports a job's status changes to `on_status` until closed."""

    def start(self, on_status: OnStatus) -> None: ...

    def close(self) -> None: ...


class JobRunner(Protocol):
    backend_name: str
    place: str  # where this runner's jobs are (as JobRef.place)

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

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        """New log lines since the positions `since`, and the positions to pass next time.
        `replicas`: only theirs (as a follower reported them), else every replica's."""

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        """What the job reported (dlc_airflow.runtime); `replicas` as a follower reported them."""

    def stop(self, ref: JobRef) -> int:
        """End the job: nothing of it keeps running; what there is to read stays (objects,
        folder, the scheduler's record). Returns how many parts it stopped (0: it had ended,
        or is gone)."""

    def delete(self, ref: JobRef) -> None:
        """Stop the job, then remove it and everything it made (on_finish='delete'); a backend
        that keeps its own record of an ended job (Slurm, until MinJobAge) keeps that."""

    def claim(self, ref: JobRef, try_number: int) -> None:
        """Record that task try `try_number` now owns the job (it submitted or adopted it)."""

    def owner_try(self, ref: JobRef) -> int | None:
        """The newest task try that claimed the job; None if it is gone or never claimed."""

    # -- for people: the job CLI and the report page -------------------------------------
    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        """Every dlc-airflow job of this backend here, oldest first; only those of one DAG,
        task or run when given (exact ids)."""

    def replicas(self, ref: JobRef) -> list[Replica]:
        """The job's replicas as last seen: the report's timeline."""


RunnerFactory = Callable[[Reach], JobRunner]


# -- optional capabilities: a runner implements them or not (isinstance tells) ----------------


@runtime_checkable
class EventSource(Protocol):
    """The backend keeps events about a job (Kubernetes Events, DLC's job events)."""

    def events(self, ref: JobRef, seen: Collection[str] = ()) -> list[Event]:
        """The job's events whose uid is not in `seen`."""


@runtime_checkable
class QueueSource(Protocol):
    """The backend queues jobs and can tell where a queued one stands (Kueue's visibility API)."""

    def queue_position(self, ref: JobRef) -> str:
        """Where the queued job stands, in words ('' when it is not pending or nobody says)."""


@runtime_checkable
class GuardedStop(Protocol):
    """The backend can stop a job only while no newer try has claimed it, as one step (the
    API server refuses a stop that a claim overtook), closing the window between an older
    try's ownership check and its stop."""

    def stop_unless_claimed(self, ref: JobRef, try_number: int) -> tuple[bool, int | None]:
        """Stop the job unless a try newer than `try_number` claimed it; returns (stopped, the
        newest claiming try as read)."""


@runtime_checkable
class Settler(Protocol):
    """Parts of a finished job may run on (a native job's parameter servers): `settle`."""

    def settle(self, ref: JobRef) -> list[str]:
        """Once the job has finished: stop the parts still running; returns their names."""


@runtime_checkable
class SpecKeeper(Protocol):
    """The backend keeps the spec a job was submitted with (`dlc-airflow jobs clone/script`)."""

    def spec(self, ref: JobRef) -> JSONDict | None:
        """The spec as submitted (dlc_airflow.specpack: secrets as references); None when
        the job is gone or kept none."""


@runtime_checkable
class SecretReader(Protocol):
    """Reads the values of the Secret sources a job's env names, where this identity may (to
    mask them in the logs): readable Kubernetes Secrets, the local backend's stand-ins."""

    def secret_values(self, refs: Sequence[SecretKeyRef], log: Log) -> list[str]: ...
