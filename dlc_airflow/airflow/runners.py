"""Pick and build the runner a task talks to: a cluster backend through the connection, or
the local backend. Every runner implements dlc_airflow.runner.JobRunner, so the operator,
trigger and sensor do not care which it is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.local.jobrunner import LOCAL, LocalJobRunner
from dlc_airflow.registry import ALL_BACKENDS, check_backend_name, has_connection, is_folder, is_kubernetes
from dlc_airflow.runner import JobRunner

BACKENDS = ALL_BACKENDS

# Backends that are neither on Kubernetes nor local: the runner from (conn_id, namespace,
# connection) - connection is the Airflow Connection when the caller has read it already
# (the triggerer reads it asynchronously), else None. Imported when used; typed, so mypy
# checks each runner against the JobRunner Protocol.
RunnerFactory = Callable[[str, "str | None", Any], JobRunner]


def _pai_runner(conn_id: str, namespace: str | None, connection: Any) -> JobRunner:
    from dlc_airflow.pai.runner import make_runner as make

    return make(conn_id, namespace, connection)


def _slurm_runner(conn_id: str, namespace: str | None, connection: Any) -> JobRunner:
    from dlc_airflow.slurm.runner import make_runner as make

    return make(conn_id, namespace, connection)


RUNNER_FACTORIES: dict[str, RunnerFactory] = {"pai": _pai_runner, "slurm": _slurm_runner}


class NoSuchConnection(ValueError):
    """conn_id names a connection that does not exist (permanent: fail the task)."""

    permanent = True


def choose_backend(backend: str | None, conn_id: str | None) -> tuple[str, str, str]:
    """(backend, connection id, why) for a task.

    Without backend=: a cluster when one is configured, and `local` only when none is at
    all - no connection of that id, no kubeconfig, not in a pod - and the task named no
    conn_id: a named connection that does not exist is an error, never a silent run on the
    worker host.
    """
    if backend:
        check_backend_name(backend)
        if conn_id is not None and has_connection(backend) and not connection_exists(conn_id):
            raise NoSuchConnection(_missing(conn_id))
        return backend, conn_id or DEFAULT_CONN_ID, "backend= is set on the task"
    if conn_id is not None:
        if not connection_exists(conn_id):
            raise NoSuchConnection(_missing(conn_id))
        return "native", conn_id, f"connection {conn_id!r} exists"
    if connection_exists(DEFAULT_CONN_ID):
        return "native", DEFAULT_CONN_ID, f"connection {DEFAULT_CONN_ID!r} exists"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "native", DEFAULT_CONN_ID, "running in a Kubernetes pod (in-cluster configuration)"
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    if os.environ.get("KUBECONFIG") or Path(kubeconfig).exists():
        return "native", DEFAULT_CONN_ID, f"a kubeconfig is configured ({kubeconfig})"
    return LOCAL, DEFAULT_CONN_ID, (f"no cluster is configured (no connection {DEFAULT_CONN_ID!r}, no kubeconfig, "
                                    "not in a pod): jobs run as local processes on this host")


def _missing(conn_id: str) -> str:
    return (f"connection {conn_id!r} does not exist: create it (airflow connections add {conn_id} "
            "--conn-type kubernetes ...), or leave conn_id unset to use the default")


def read_connection(conn_id: str) -> Any | None:
    """The connection (None when it does not exist, or there is no Airflow at all)."""
    try:
        from airflow.sdk.bases.hook import BaseHook

        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - AirflowNotFoundException, or no Airflow at all
        return None


def connection_exists(conn_id: str) -> bool:
    return read_connection(conn_id) is not None


def connection_for(backend: str, conn_id: str) -> tuple[Any | None, dict[str, Any] | None]:
    """(connection, extras) for starting a job, read once: every round trip is a task's time
    before it defers. (None, None) on a backend without connections (local)."""
    if not has_connection(backend):
        return None, None
    connection = read_connection(conn_id)
    return connection, dict(connection.extra_dejson or {}) if connection is not None else {}


def make_runner(backend: str, conn_id: str, namespace: str | None, *, extras: dict | None = None,
                local_root: str | None = None, connection: Any | None = None) -> JobRunner:
    if is_folder(backend):
        return LocalJobRunner(local_root)
    if not is_kubernetes(backend):
        return RUNNER_FACTORIES[backend](conn_id, namespace, connection)
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.connection import KubeConnection
    from dlc_airflow.k8s.runner import KubeRunner

    kube = KubeConnection(conn_id, namespace=namespace, extras=extras)
    client = kube.get_client()
    return KubeRunner(client, get_backend(backend), client.namespace, cluster_key=kube.cluster_key())


_shared: dict[tuple, JobRunner] = {}
_shared_lock = threading.Lock()


def shared_runner(backend: str, conn_id: str, namespace: str | None, *, extras: dict | None = None,
                  local_root: str | None = None, connection: Any | None = None) -> JobRunner:
    """make_runner, reused by every trigger of a triggerer process with the same connection
    settings: one API client (and connection pool) per cluster, not one per waiting job."""
    key = (backend, conn_id, namespace, local_root, repr(sorted((extras or {}).items())))
    with _shared_lock:
        runner = _shared.get(key)
    if runner is None:
        runner = make_runner(backend, conn_id, namespace, extras=extras, local_root=local_root,
                             connection=connection)
        with _shared_lock:
            runner = _shared.setdefault(key, runner)
    return runner
