"""Every backend by name: its pure half (the job types it runs, `check`) and its runner.

The Kubernetes backends live in dlc_airflow.backends; the others in their own packages,
imported only when used, so a DAG file that names one backend loads nothing of the rest.
A backend's pure half answers `name`, `job_types` and `check(job)` (BackendError naming
what it cannot run and what to use instead).
"""

from __future__ import annotations

from importlib import import_module
from typing import ClassVar, Protocol

from dlc_airflow.backends import BACKENDS as KUBERNETES_BACKENDS
from dlc_airflow.backends import BackendError, get_backend
from dlc_airflow.jobtypes import JobType
from dlc_airflow.spec import DLCJob

LOCAL = "local"

# name -> "module:Class" of the pure half of the backends that are not on Kubernetes
OTHER_BACKENDS: dict[str, str] = {
    LOCAL: "dlc_airflow.local.backend:LocalBackend",
    "pai": "dlc_airflow.pai.backend:PaiBackend",
    "slurm": "dlc_airflow.slurm.backend:SlurmBackend",
}

ALL_BACKENDS: tuple[str, ...] = (*KUBERNETES_BACKENDS, *OTHER_BACKENDS)


class PureBackend(Protocol):
    name: ClassVar[str]
    job_types: ClassVar[frozenset[JobType]]

    def check(self, job: DLCJob) -> None: ...


def is_kubernetes(name: str) -> bool:
    return name in KUBERNETES_BACKENDS


def has_connection(name: str) -> bool:
    """Whether backend `name` reaches its jobs through an Airflow connection (all but local,
    whose jobs are processes of this host)."""
    return name != LOCAL


def is_folder(name: str) -> bool:
    """Whether backend `name`'s jobs live in a folder of this host (a JobRef's namespace is
    then the job root)."""
    return name == LOCAL


def pure_backend(name: str) -> PureBackend:
    """The pure half of backend `name`; BackendError for an unknown one, listing them all."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in KUBERNETES_BACKENDS:
        return get_backend(key)
    if key in OTHER_BACKENDS:
        module, _, cls = OTHER_BACKENDS[key].partition(":")
        backend: PureBackend = getattr(import_module(module), cls)()
        return backend
    raise BackendError(f"unknown backend {name!r}: choose one of {', '.join(ALL_BACKENDS)}")


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
