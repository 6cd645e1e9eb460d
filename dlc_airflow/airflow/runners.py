"""Pick and build the runner a task talks to: a cluster backend through the connection, or
the local backend. Every runner implements dlc_airflow.runner.JobRunner, so the operator,
trigger and sensor do not care which it is.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from importlib import import_module
from typing import Any

from dlc_airflow.local.jobrunner import LOCAL, LocalJobRunner
from dlc_airflow.registry import ALL_BACKENDS, is_kubernetes
from dlc_airflow.runner import JobRunner

BACKENDS = ALL_BACKENDS

# Backends that are neither on Kubernetes nor local: "module:function" building the runner
# from (conn_id, namespace, connection) - connection is the Airflow Connection when the
# caller has read it already (the triggerer reads it asynchronously), else None.
RUNNER_FACTORIES: dict[str, str] = {}


def resolve_backend(backend: str | None, conn_id: str) -> str:
    """The backend to use; without one: a cluster when one is configured, else local."""
    if backend:
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        return backend
    return "native" if cluster_configured(conn_id) else LOCAL


def cluster_configured(conn_id: str) -> bool:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    if os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
        return True
    try:
        from airflow.sdk.bases.hook import BaseHook

        BaseHook.get_connection(conn_id)
        return True
    except Exception:  # noqa: BLE001 - no such connection: no cluster configured
        return False


def make_runner(backend: str, conn_id: str, namespace: str | None, *, extras: dict | None = None,
                local_root: str | None = None, connection: Any | None = None) -> JobRunner:
    if backend == LOCAL:
        return LocalJobRunner(local_root)
    if not is_kubernetes(backend):
        module, _, func = RUNNER_FACTORIES[backend].partition(":")
        runner: JobRunner = getattr(import_module(module), func)(conn_id, namespace, connection)
        return runner
    from dlc_airflow.airflow.hook import DLCHook
    from dlc_airflow.backends import get_backend
    from dlc_airflow.k8s.runner import KubeRunner

    hook = DLCHook(conn_id, namespace=namespace, extras=extras)
    client = hook.get_client()
    return KubeRunner(client, get_backend(backend), client.namespace, cluster_key=hook.cluster_key())


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
