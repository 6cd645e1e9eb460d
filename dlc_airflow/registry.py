"""Every backend by name, once: its pure half, its typed runner factory, and what the code
around it needs to know (`Entry`). Nothing outside a backend's package tests a backend's
name: it asks here.

The Kubernetes backends live in dlc_airflow.k8s; the others in their own packages, imported
only when used, so a DAG file that names one backend loads nothing of the rest. A backend's
pure half answers `name`, `job_types`, `check(job)` (BackendError naming what it cannot run;
`check` here adds the backends that run it) and `preview(job, name)` (what `dlc-airflow
render` prints: what would be submitted). Its runner factory takes a `Reach` (the
connection, the place, the local job root) and returns a JobRunner: mypy checks each one
against the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.errors import BackendError, UnsupportedType
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends import BACKENDS as KUBERNETES_BACKENDS
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.runner import JobRunner, Reach, RunnerFactory
from dlc_airflow.spec import DLCJob

LOCAL = "local"
# what a task without backend= gets: on a cluster, and where no cluster is configured
CLUSTER_DEFAULT = "native"
NO_CLUSTER_DEFAULT = LOCAL


class PureBackend(Protocol):
    name: ClassVar[str]
    job_types: ClassVar[frozenset[JobType]]

    def check(self, job: DLCJob) -> None: ...

    def preview(self, job: DLCJob, name: str) -> list[Any]:
        """What would be submitted for `job` as `name`, as YAML documents (Kubernetes objects,
        a Slurm batch script and job request, a DLC CreateJob request): `dlc-airflow render`."""


# The pure halves of the backends that are not on Kubernetes, imported when first asked for.
def _local() -> PureBackend:
    from dlc_airflow.local.backend import LocalBackend

    return LocalBackend()


def _pai() -> PureBackend:
    from dlc_airflow.pai.backend import PaiBackend

    return PaiBackend()


def _slurm() -> PureBackend:
    from dlc_airflow.slurm.backend import SlurmBackend

    return SlurmBackend()


# Their runner factories, imported when first used (typed: mypy checks each runner).
def _kubernetes_runner(name: str) -> RunnerFactory:
    def make(reach: Reach) -> JobRunner:
        from dlc_airflow.k8s.runner import make_runner

        return make_runner(name, reach)

    return make


def _local_runner(reach: Reach) -> JobRunner:
    from dlc_airflow.local.runner import make_runner

    return make_runner(reach)


def _pai_runner(reach: Reach) -> JobRunner:
    from dlc_airflow.pai.runner import make_runner

    return make_runner(reach)


def _slurm_runner(reach: Reach) -> JobRunner:
    from dlc_airflow.slurm.runner import make_runner

    return make_runner(reach)


@dataclass(frozen=True)
class Entry:
    """What the code around a backend needs to know of it, by name."""

    name: str
    pure: Callable[[], PureBackend]
    runner: RunnerFactory
    kubernetes: bool = False
    # reaches its jobs through an Airflow connection (all but local, whose jobs are
    # processes of this host)
    connection: bool = True
    # its jobs live in a folder of this host (a JobRef's namespace is then the job root)
    folder: bool = False
    # its jobs are kept from the worker's files and rights (all but local, whose jobs are
    # processes of the worker's user): the admin's policy defaults differ (dlc_airflow.policy)
    isolated: bool = True
    # its runner reads a job's logs from files of this host (no request per read): the triggerer
    # reads them on a clock too, for the job's progress lines (dlc_airflow.airflow.trigger)
    file_logs: bool = False
    # the connection id used when a task or the jobs CLI names none (the pai and slurm
    # packages define theirs; tests/unit/test_registry.py checks they agree)
    default_conn_id: str = DEFAULT_CONN_ID
    note: str = ""  # said after its name where the registry suggests it ("default", "KubeRay")


def _kubernetes(name: str) -> Entry:
    note = {CLUSTER_DEFAULT: "default", "ray": "KubeRay"}.get(name, "")
    return Entry(name, lambda: get_backend(name), _kubernetes_runner(name), kubernetes=True, note=note)


ENTRIES: dict[str, Entry] = {
    **{name: _kubernetes(name) for name in KUBERNETES_BACKENDS},
    LOCAL: Entry(LOCAL, _local, _local_runner, connection=False, folder=True, isolated=False, file_logs=True,
                 default_conn_id=""),
    "pai": Entry("pai", _pai, _pai_runner, default_conn_id="pai_default"),
    "slurm": Entry("slurm", _slurm, _slurm_runner, file_logs=True, default_conn_id="slurm_default"),
}
ALL_BACKENDS: tuple[str, ...] = tuple(ENTRIES)


def entry(name: str) -> Entry:
    """The registry's entry for backend `name` (exactly as spelled); BackendError if none."""
    return ENTRIES[check_backend_name(name)]


def is_kubernetes(name: str) -> bool:
    return name in KUBERNETES_BACKENDS


def has_connection(name: str) -> bool:
    """Whether backend `name` reaches its jobs through an Airflow connection."""
    return entry(name).connection


def is_folder(name: str) -> bool:
    """Whether backend `name`'s jobs live in a folder of this host."""
    return entry(name).folder


def has_file_logs(name: str) -> bool:
    """Whether backend `name`'s runner reads job logs from files of this host."""
    return entry(name).file_logs


def pure_backend(name: str) -> PureBackend:
    """The pure half of backend `name`; BackendError for an unknown one, listing them all."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in ENTRIES:
        raise BackendError(f"unknown backend {name!r}: choose one of {', '.join(ALL_BACKENDS)}")
    return ENTRIES[key].pure()


def check_backend_name(name: str) -> str:
    """`name` if it is a backend (exactly as spelled), else BackendError listing them all."""
    if name not in ALL_BACKENDS:
        hint = f" (did you mean {name.strip().lower()!r}?)" if isinstance(name, str) and name.strip().lower() in ALL_BACKENDS else ""
        raise BackendError(f"unknown backend {name!r}{hint}: choose one of {', '.join(ALL_BACKENDS)}")
    return name


def backends_running(job_type: JobType | str) -> list[str]:
    """Names of the backends whose `job_types` include `job_type`, in registry order."""
    wanted = JobType(job_type)
    return [name for name in ALL_BACKENDS if wanted in pure_backend(name).job_types]


def check(name: str, job: DLCJob) -> None:
    """Whether backend `name` can run `job`: BackendError naming what it cannot, and (for a
    type it does not run) the backends that do."""
    try:
        pure_backend(check_backend_name(name)).check(job)
    except UnsupportedType as exc:
        raise exc.naming(suggest(exc.job_type, name)) from None


def suggest(job_type: str, current: str) -> str:
    """'use backend=...' naming the other backends that run `job_type` (their `job_types`)."""
    names = [b for b in backends_running(job_type) if b != current]
    if not names:
        return "no backend runs it"
    quoted = [f"'{b}'" + (f" ({ENTRIES[b].note})" if ENTRIES[b].note else "") for b in names]
    listed = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"use backend={listed}"
