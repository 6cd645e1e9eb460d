"""Pick and build the runner a task talks to: a cluster backend through the connection, or
the local backend. Both answer the same calls (submit, find, status, follower, logs,
events, outputs, stop), so the operator, trigger and sensor do not care which it is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlc_airflow.k8s.kinds import ResourceKind
from dlc_airflow.k8s.runner import JobRef
from dlc_airflow.naming import LABEL_ATTEMPT, LABEL_JOB, TaskIdentity, job_labels, task_labels
from dlc_airflow.status import JobStatus

LOCAL = "local"
LOCAL_KIND = ResourceKind("dlc-airflow/local", "LocalJob", "localjobs")
BACKENDS = ("native", "kubeflow", "trainer", "jobset", "ray", LOCAL)


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
                local_root: str | None = None) -> Any:
    if backend == LOCAL:
        return LocalJobRunner(local_root)
    from dlc_airflow.airflow.hook import DLCHook
    from dlc_airflow.backends import get_backend
    from dlc_airflow.k8s.runner import KubeRunner

    hook = DLCHook(conn_id, namespace=namespace, extras=extras)
    client = hook.get_client()
    return KubeRunner(client, get_backend(backend), client.namespace, cluster_key=hook.cluster_key())


_shared: dict[tuple, Any] = {}
_shared_lock = threading.Lock()


def shared_runner(backend: str, conn_id: str, namespace: str | None, *, extras: dict | None = None,
                  local_root: str | None = None) -> Any:
    """make_runner, reused by every trigger of a triggerer process with the same connection
    settings: one API client (and connection pool) per cluster, not one per waiting job."""
    key = (backend, conn_id, namespace, local_root, repr(sorted((extras or {}).items())))
    with _shared_lock:
        runner = _shared.get(key)
    if runner is None:
        runner = make_runner(backend, conn_id, namespace, extras=extras, local_root=local_root)
        with _shared_lock:
            runner = _shared.setdefault(key, runner)
    return runner


class LocalJobRunner:
    """The local backend (dlc_airflow.local.LocalRunner) behind the runner calls."""

    backend_name = LOCAL

    def __init__(self, root: str | None = None):
        from dlc_airflow.local import LocalRunner

        self.local = LocalRunner(root)
        self.namespace = str(self.local.root)

    def ref(self, name: str, attempt: int = 1) -> JobRef:
        return JobRef(name=name, namespace=self.namespace, backend=LOCAL, kind=LOCAL_KIND,
                      kinds=(LOCAL_KIND,), attempt=attempt)

    def submit(self, job: Any, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        created = self.local.submit(job, name, job_labels(name, identity, attempt))
        return self.ref(name, attempt), created

    def find(self, identity: TaskIdentity, kind: ResourceKind | None = None) -> list[JobRef]:
        refs = []
        for name in self.local.find(task_labels(identity)):
            labels = self.local.labels(name)
            refs.append(self.ref(labels.get(LABEL_JOB, name), int(labels.get(LABEL_ATTEMPT, "1"))))
        return sorted(refs, key=lambda r: r.attempt)

    def status(self, ref: JobRef) -> JobStatus:
        return self.local.status(ref.name)

    def pods(self, ref: JobRef) -> list[dict]:
        return []

    def follower(self, ref: JobRef) -> LocalFollower:
        return LocalFollower(self, ref)

    def logs(self, ref: JobRef, since: dict | None = None, pods: list[dict] | None = None):
        return self.local.read_logs(ref.name, since)

    def events(self, ref: JobRef, seen: set[str] | None = None) -> list[dict]:
        return []

    def outputs(self, ref: JobRef, pods: list[dict] | None = None) -> dict:
        return self.local.outputs(ref.name)

    def stop(self, ref: JobRef) -> int:
        self.local.stop(ref.name)
        return 1

    def settle(self, ref: JobRef) -> list[str]:
        return []  # the supervisor ends every replica when the job ends

    def delete(self, ref: JobRef) -> None:
        self.local.delete(ref.name)


class LocalFollower:
    """Reports a local job's status changes; the state file is polled every 50 ms."""

    def __init__(self, runner: LocalJobRunner, ref: JobRef, interval: float = 0.05):
        self.runner, self.ref, self.interval = runner, ref, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_status: Callable[[JobStatus, list[dict]], None]) -> None:
        def poll() -> None:
            last = None
            while not self._stop.is_set():
                status = self.runner.status(self.ref)
                if status != last:
                    on_status(status, [])
                    last = status
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=poll, daemon=True, name=f"dlc-local-{self.ref.name}")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2)
