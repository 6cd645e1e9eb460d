"""Pick and build the runner a task talks to: which backend and connection (`choose_backend`,
`connection_for`), and its runner through the backend's registry entry (`make_runner`; one
shared per connection in a triggerer, `shared_runner`). Every runner implements
dlc_airflow.runner.JobRunner, so the operator, trigger and sensor do not care which it is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.registry import (
    ALL_BACKENDS,
    CLUSTER_DEFAULT,
    NO_CLUSTER_DEFAULT,
    check_backend_name,
    entry,
    has_connection,
    is_folder,
)
from dlc_airflow.runner import Connection, JobRunner, Reach

BACKENDS = ALL_BACKENDS


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
        return CLUSTER_DEFAULT, conn_id, f"connection {conn_id!r} exists"
    if connection_exists(DEFAULT_CONN_ID):
        return CLUSTER_DEFAULT, DEFAULT_CONN_ID, f"connection {DEFAULT_CONN_ID!r} exists"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return CLUSTER_DEFAULT, DEFAULT_CONN_ID, "running in a Kubernetes pod (in-cluster configuration)"
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    if os.environ.get("KUBECONFIG") or Path(kubeconfig).exists():
        return CLUSTER_DEFAULT, DEFAULT_CONN_ID, f"a kubeconfig is configured ({kubeconfig})"
    return NO_CLUSTER_DEFAULT, DEFAULT_CONN_ID, (f"no cluster is configured (no connection {DEFAULT_CONN_ID!r}, no kubeconfig, "
                                    "not in a pod): jobs run as local processes on this host")


def _missing(conn_id: str) -> str:
    return (f"connection {conn_id!r} does not exist: create it (airflow connections add {conn_id} "
            "--conn-type kubernetes ...), or leave conn_id unset to use the default")


def read_connection(conn_id: str) -> Connection | None:
    """The connection (None when it does not exist, or there is no Airflow at all)."""
    try:
        from airflow.sdk.bases.hook import BaseHook

        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - AirflowNotFoundException, or no Airflow at all
        return None


def connection_exists(conn_id: str) -> bool:
    return read_connection(conn_id) is not None


def connection_for(backend: str, conn_id: str) -> tuple[Connection | None, JSONObject | None]:
    """(connection, extras) for starting a job, read once: every round trip is a task's time
    before it defers. (None, None) on a backend without connections (local)."""
    if not has_connection(backend):
        return None, None
    connection = read_connection(conn_id)
    return connection, dict(connection.extra_dejson or {}) if connection is not None else {}


def make_runner(backend: str, conn_id: str, namespace: str | None, *, extras: JSONObject | None = None,
                local_root: str | None = None, connection: Connection | None = None) -> JobRunner:
    """The runner of `backend` through its registry entry's factory."""
    return entry(backend).runner(Reach(conn_id, namespace, local_root, connection, extras))


def runner_of(published: Mapping[str, Any], *, conn_id: str | None = None, namespace: str | None = None,
              local_root: str | None = None) -> tuple[JobRunner, JobRef]:
    """The runner and ref of a job a task published (its XCom `dlc_job`, lifecycle.publication,
    in this or an older shape): its backend, connection and place (a job folder's root for a
    backend whose jobs live in folders). The arguments override what was published."""
    ref = JobRef.from_dict(published)
    conn = conn_id or published.get("conn_id") or entry(ref.backend).default_conn_id or DEFAULT_CONN_ID
    root = local_root or published.get("local_root") or (ref.place if is_folder(ref.backend) else None)
    return make_runner(ref.backend, conn, namespace or ref.place, local_root=root), ref


_shared: dict[tuple[str, str, str | None, str | None, str], JobRunner] = {}
_shared_lock = threading.Lock()


def shared_runner(backend: str, conn_id: str, namespace: str | None, *, extras: JSONObject | None = None,
                  local_root: str | None = None, connection: Connection | None = None) -> JobRunner:
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
