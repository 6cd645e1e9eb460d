"""Kubernetes backends: pure render and status functions per target API.

    backend = get_backend("native")          # or kubeflow, trainer, jobset, ray
    objects = backend.render(job, name, identity, attempt)   # first object is the primary
    state = backend.status(server_objects, pods)              # JobStatus

| backend  | objects                                   | types                                   |
|----------|-------------------------------------------|-----------------------------------------|
| native   | batch/v1 Indexed Job per role + Service   | all but ray                             |
| jobset   | jobset.x-k8s.io/v1alpha2 JobSet           | all but ray                             |
| kubeflow | kubeflow.org/v1 PyTorchJob/TFJob/MPIJob/XGBoostJob | torch types, tensorflow, mpi, xgboost |
| trainer  | trainer.kubeflow.org/v1alpha1 TrainJob    | pytorch, deepspeed, megatron, mpi       |
| ray      | ray.io/v1 RayJob                          | ray                                     |

The types are declared once, as each backend class's `job_types`; `backends_running` reads them.
"""

from __future__ import annotations

from collections.abc import Callable

from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends.base import Backend, ResourceKind

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "Backend",
    "ResourceKind",
    "backends_running",
    "get_backend",
]

DEFAULT_BACKEND = "native"


def _native() -> Backend:
    from dlc_airflow.k8s.backends.native import NativeBackend

    return NativeBackend()


def _kubeflow() -> Backend:
    from dlc_airflow.k8s.backends.kubeflow import KubeflowBackend

    return KubeflowBackend()


def _trainer() -> Backend:
    from dlc_airflow.k8s.backends.trainer import TrainerBackend

    return TrainerBackend()


def _jobset() -> Backend:
    from dlc_airflow.k8s.backends.jobset import JobSetBackend

    return JobSetBackend()


def _ray() -> Backend:
    from dlc_airflow.k8s.backends.ray import RayBackend

    return RayBackend()


BACKENDS: dict[str, Callable[[], Backend]] = {
    "native": _native,
    "kubeflow": _kubeflow,
    "trainer": _trainer,
    "jobset": _jobset,
    "ray": _ray,
}


def get_backend(name: str | None = None) -> Backend:
    """The backend called `name` (default: native)."""
    key = (name or DEFAULT_BACKEND).strip().lower()
    try:
        factory = BACKENDS[key]
    except KeyError:
        raise BackendError(
            f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)} (default {DEFAULT_BACKEND})"
        ) from None
    return factory()


def backends_running(job_type: JobType | str) -> list[str]:
    """Names of the backends whose `job_types` include `job_type`, in registry order.

    Each backend declares its types once, as the class attribute `job_types`; this reads it
    (backends are stateless and cheap to make).
    """
    wanted = JobType(job_type)
    return [name for name, factory in BACKENDS.items()
            if wanted in getattr(type(factory()), "job_types", frozenset())]
