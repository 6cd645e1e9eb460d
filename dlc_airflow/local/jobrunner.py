"""The local backend behind the runner contract (dlc_airflow.runner.JobRunner).

A thin adapter over LocalRunner (which works by job name on the job folders): refs carry
the job root as their namespace, so any process that has the ref finds the job.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from dlc_airflow.errors import SecretSourceError, SubmitError
from dlc_airflow.jobinfo import JobInfo, Replica, attempt_of
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.kinds import ResourceKind
from dlc_airflow.local.runner import LocalRunner
from dlc_airflow.local.secrets import local_secret
from dlc_airflow.naming import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    MANAGED_BY,
    MANAGER,
    TaskIdentity,
    job_annotations,
    job_labels,
    task_labels,
)
from dlc_airflow.runner import Log, LogLines, OnStatus
from dlc_airflow.secrets.resolve import Entry
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.status import JobStatus, parse_time

LOCAL = "local"
LOCAL_KIND = ResourceKind("dlc-airflow/local", "LocalJob", "localjobs")


class LocalJobRunner:
    backend_name = LOCAL

    def __init__(self, root: str | None = None):
        self.local = LocalRunner(root)
        self.namespace = str(self.local.root)

    def ref(self, job: DLCJob | None, name: str, attempt: int = 1) -> JobRef:
        return JobRef(name=name, namespace=self.namespace, backend=LOCAL, kind=LOCAL_KIND,
                      kinds=(LOCAL_KIND,), attempt=attempt, uid=self.local.uid(name))

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        refs = []
        for name in self.local.find(task_labels(identity)):
            labels = self.local.labels(name)
            refs.append(self.ref(job, labels.get(LABEL_JOB, name), int(labels.get(LABEL_ATTEMPT, "1"))))
        return sorted(refs, key=lambda r: r.attempt)

    def lookup(self, name: str) -> JobRef | None:
        found = self.local.find({LABEL_JOB: name})
        if not found:
            return None
        return self.ref(None, name, int(self.local.labels(name).get(LABEL_ATTEMPT, "1")))

    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        from dlc_airflow.errors import BackendError
        from dlc_airflow.local.backend import LocalBackend

        try:  # a task without backend= lands here at run time: refuse what cannot run locally
            LocalBackend().check(job)
        except BackendError as exc:
            raise SubmitError(str(exc), permanent=True) from None
        created = self.local.submit(job, name, job_labels(name, identity, attempt), job_annotations(identity))
        return self.ref(job, name, attempt), created

    def status(self, ref: JobRef) -> JobStatus:
        return self.local.status(ref.name)

    def follow(self, ref: JobRef) -> LocalFollower:
        return LocalFollower(self, ref)

    def logs(self, ref: JobRef, since: dict[str, Any] | None = None,
             pods: list[dict] | None = None) -> tuple[LogLines, dict[str, Any]]:
        lines, offsets = self.local.read_logs(ref.name, since)
        return lines, dict(offsets)

    def events(self, ref: JobRef, seen: set[str] | None = None) -> list[dict]:
        return []  # what happens to a replica is noted in its log instead

    def outputs(self, ref: JobRef, pods: list[dict] | None = None) -> dict[str, dict]:
        return self.local.outputs(ref.name)

    def settle(self, ref: JobRef) -> list[str]:
        return []  # the supervisor ends every replica when the job ends

    def stop(self, ref: JobRef) -> int:
        return 1 if self.local.stop(ref.name) else 0

    def delete(self, ref: JobRef) -> None:
        self.local.delete(ref.name)

    def claim(self, ref: JobRef, try_number: int) -> None:
        self.local.claim(ref.name, try_number)

    def owner_try(self, ref: JobRef) -> int | None:
        return self.local.owner_try(ref.name)

    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        found = []
        for name in self.local.find({MANAGED_BY: MANAGER}):
            labels = self.local.labels(name)
            ref = self.ref(None, name, attempt_of(labels))
            info = JobInfo.of(ref, labels, self.local.annotations(name), self.local.status(name).created)
            if info.matches(dag_id, task_id, run_id):
                found.append(info)
        return found

    def spec(self, ref: JobRef) -> dict[str, Any] | None:
        return self.local.spec(ref.name)

    def secret_values(self, refs: Sequence[SecretKeyRef], log: Log) -> list[str]:
        """The local stand-ins of the Secret sources (those that exist)."""
        values = []
        for ref in refs:
            try:
                values.append(local_secret(Entry("env", "?", ref, "?"), ref, self.local.root))
            except SecretSourceError:
                continue
        return values

    def replicas(self, ref: JobRef) -> list[Replica]:
        """From the supervisor's record; a replica still marked running when the job ended was
        ended with it."""
        finished = self.local.status(ref.name).finished
        found = []
        for key, data in self.local.replica_states(ref.name).items():
            role, _, index = key.rpartition("-")
            phase = data.get("phase") or "pending"
            ended = parse_time(data.get("ended")) or (finished if phase in ("running", "health") else None)
            found.append(Replica(
                name=key, role=role, index=int(index) if index.isdigit() else 0, state=_REPLICA_STATES.get(phase, phase),
                started=parse_time(data.get("began")), finished=ended, exit_code=data.get("exit_code"),
                restarts=int(data.get("restarts") or 0), node="localhost", uid=str(data.get("pid") or "")))
        return found


# the supervisor's replica phases in the words pods use
_REPLICA_STATES = {"pending": "Pending", "health": "Running", "running": "Running", "backoff": "Pending",
                   "succeeded": "Succeeded", "failed": "Failed", "stopped": "Stopped"}


class LocalFollower:
    """Reports a local job's status changes; the state file is polled every 50 ms."""

    def __init__(self, runner: LocalJobRunner, ref: JobRef, interval: float = 0.05):
        self.runner, self.ref, self.interval = runner, ref, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_status: OnStatus) -> None:
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
