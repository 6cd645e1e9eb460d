"""PaiRunner: the runner contract (dlc_airflow.runner.JobRunner) on a DLC workspace.

A JobRef's namespace is the workspace id and its uid the DLC JobId. Idempotency: the
DisplayName is our deterministic job name and the job's tags carry the task identity, so a
retried task finds its jobs with one ListJobs (Tags filter) and `submit` adopts a job of
that name instead of creating a second one. DLC creates a job in one call: a refused
CreateJob leaves nothing behind.

    runner = make_runner("pai_default", None, None)     # reads the dlc_pai connection
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from dlc_airflow import reasons
from dlc_airflow.errors import BackendError, OwnershipError, SubmitError
from dlc_airflow.jobinfo import JobInfo, Replica, replicas_from_pods
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.kinds import ResourceKind
from dlc_airflow.naming import LABEL_ATTEMPT, LABEL_JOB, LABEL_TASK_KEY, LABEL_TRY, TaskIdentity
from dlc_airflow.pai import backend
from dlc_airflow.pai.client import PaiClient, PaiError
from dlc_airflow.pai.poller import REGISTRY, PollerRegistry, iso
from dlc_airflow.pai.settings import PaiSettings, get_connection, settings_from
from dlc_airflow.runner import LogLines, OnStatus
from dlc_airflow.runtime.metrics import parse_metric_line
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, parse_time

log = logging.getLogger(__name__)

PAI = backend.NAME
PAI_KIND = ResourceKind("pai-dlc/2020-12-03", "DLCJob", "jobs", namespaced=True)
FIND_WINDOW = timedelta(days=30)  # how far back a retried task looks for the jobs it made
LOG_LINES = 2000  # GetPodLogs' default page
LOG_OVERLAP = timedelta(seconds=60)  # each log read starts this far before the last one
LOG_TAIL = 20  # lines remembered per pod to find where the last read ended


def make_runner(conn_id: str, namespace: str | None, connection: Any | None) -> PaiRunner:
    """RUNNER_FACTORIES' entry: the runner of the connection's workspace (`namespace`, the
    operator's, overrides it). `connection` is an Airflow Connection, or None to read it."""
    if connection is None:
        connection = get_connection(conn_id)
    return PaiRunner(settings_from(conn_id, connection, namespace))


class PaiRunner:
    backend_name = PAI

    def __init__(self, settings: PaiSettings, client: PaiClient | None = None,
                 registry: PollerRegistry = REGISTRY) -> None:
        self.settings = settings
        self.namespace = settings.workspace_id
        self.client = client or PaiClient(settings)
        self.registry = registry

    # -- refs --------------------------------------------------------------------------
    def ref(self, job: DLCJob | None, name: str, attempt: int = 1, uid: str = "") -> JobRef:
        return JobRef(name=name, namespace=self.namespace, backend=PAI, kind=PAI_KIND, kinds=(PAI_KIND,),
                      attempt=attempt, uid=uid)

    def _ref_of(self, item: dict[str, Any]) -> JobRef:
        tags = _tags(item)
        attempt = tags.get(LABEL_ATTEMPT, "1")
        return self.ref(None, tags.get(LABEL_JOB) or item.get("DisplayName", ""),
                        int(attempt) if attempt.isdigit() else 1, uid=str(item.get("JobId", "")))

    def _list(self, tags: dict[str, str]) -> list[dict[str, Any]]:
        """Every live job of the workspace carrying `tags` (all pages)."""
        found: list[dict[str, Any]] = []
        page, size = 1, self.settings.list_page_size
        start = iso(datetime.now(UTC) - FIND_WINDOW)
        while True:
            items, total = self.client.list_jobs(WorkspaceId=self.namespace, Tags=tags, PageSize=size,
                                                 PageNumber=page, StartTime=start, SortBy="GmtCreateTime",
                                                 Order="asc")
            found.extend(i for i in items if not i.get("IsDeleted"))
            if not items or page * size >= total:
                return found
            page += 1

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        refs = [self._ref_of(item) for item in self._list(backend.find_tags(identity))]
        return sorted(refs, key=lambda r: r.attempt)

    def lookup(self, name: str) -> JobRef | None:
        items = self._list({LABEL_JOB: name, **_managed()})
        return self._ref_of(items[-1]) if items else None

    # -- submit ------------------------------------------------------------------------
    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        try:
            fields = backend.render(job, name, identity, attempt, workspace_id=self.namespace,
                                    resource_id=self.settings.resource_id)
        except BackendError as exc:  # a template rendered into something DLC cannot run
            raise SubmitError(str(exc), permanent=True) from None
        try:
            existing = self._list({LABEL_JOB: name, **_managed()})
            if existing:  # made by an earlier try (or one killed before it heard back)
                item = existing[-1]
                theirs, ours = _tags(item).get(LABEL_TASK_KEY), identity.key if identity else None
                if theirs != ours:
                    raise OwnershipError(f"DLC job {name} ({item.get('JobId')}) already exists in workspace "
                                         f"{self.namespace} and belongs to another task (task-key {theirs}, ours "
                                         f"{ours}); rename the job or stop that one")
                log.info("adopting existing DLC job %s (%s)", name, item.get("JobId"))
                return self._ref_of(item), False
            job_id = self.client.create_job(fields)
        except PaiError as exc:
            raise SubmitError(f"submitting job {name} to DLC workspace {self.namespace} failed: {exc}",
                              permanent=exc.permanent) from None
        return self.ref(job, name, attempt, uid=job_id), True

    # -- inspect -----------------------------------------------------------------------
    def _job_id(self, ref: JobRef) -> str | None:
        if ref.uid:
            return ref.uid
        found = self.lookup(ref.name)
        return found.uid if found else None

    def get(self, ref: JobRef) -> dict[str, Any] | None:
        """The job's GetJob body; None if it is gone."""
        job_id = self._job_id(ref)
        if not job_id:
            return None
        try:
            return self.client.get_job(job_id)
        except PaiError as exc:
            if exc.not_found:
                return None
            raise

    def status(self, ref: JobRef) -> JobStatus:
        data = self.get(ref)
        return status_of(ref, data)

    def follow(self, ref: JobRef) -> PaiFollower:
        return PaiFollower(self, ref)

    def logs(self, ref: JobRef, since: dict[str, Any] | None = None,
             pods: list[dict] | None = None) -> tuple[LogLines, dict[str, Any]]:
        """New lines of each started pod (GetPodLogs), as (replica, line).

        GetPodLogs gives lines without positions: each read starts LOG_OVERLAP before the
        previous one and skips up to the last lines already logged (the pod's tail).
        """
        positions = {k: dict(v) for k, v in (since or {}).items()}
        job_id = self._job_id(ref)
        if not job_id:
            return [], positions
        if pods is None:
            pods = backend.pods(self.get(ref) or {})
        lines: LogLines = []
        for pod in pods:
            if pod["status"].get("phase") not in ("Running", "Succeeded", "Failed"):
                continue
            pod_id = pod["metadata"]["name"]
            pos = positions.get(pod_id) or {"since": pod["status"].get("startTime"), "tail": []}
            asked = datetime.now(UTC)
            try:
                got = self.client.pod_logs(job_id, pod_id, start_time=pos.get("since") or None, max_lines=LOG_LINES,
                                           pod_uid=pod["metadata"].get("uid") or None)
            except PaiError as exc:
                log.debug("no logs for %s yet: %s", pod_id, exc)
                continue
            new = after_tail(got, pos.get("tail") or [])
            name = backend.replica(pod)
            lines.extend((name, line) for line in new)
            tail = (list(pos.get("tail") or []) + new)[-LOG_TAIL:]
            positions[pod_id] = {"since": iso(asked - LOG_OVERLAP), "tail": tail}
        return lines, positions

    def events(self, ref: JobRef, seen: set[str] | None = None) -> list[dict]:
        job_id = self._job_id(ref)
        if not job_id:
            return []
        try:
            raw = self.client.job_events(job_id)
        except PaiError as exc:
            log.debug("no events for %s: %s", ref.name, exc)
            return []
        return [e for e in (event_of(ref, text, i) for i, text in enumerate(raw))
                if e["metadata"]["uid"] not in (seen or ())]

    def outputs(self, ref: JobRef, pods: list[dict] | None = None) -> dict[str, dict]:
        """Metrics the coordinator printed (`DLC_METRICS {...}` lines, the latest value of
        each): DLC keeps no termination message, so report_output's outputs stay empty."""
        merged: dict[str, dict] = {"metrics": {}, "outputs": {}}
        data = self.get(ref) if pods is None else None
        candidates = pods if pods is not None else backend.pods(data or {})
        if not candidates or not ref.uid:
            return merged
        first = sorted(candidates, key=_rank)[0]
        try:
            lines = self.client.pod_logs(ref.uid, first["metadata"]["name"], max_lines=LOG_LINES,
                                         start_time=first["status"].get("startTime"))
        except PaiError as exc:
            log.debug("no logs for %s outputs: %s", ref.name, exc)
            return merged
        for line in lines:
            if (record := parse_metric_line(line)) is not None:
                merged["metrics"].update(record)
        return merged

    # -- stop --------------------------------------------------------------------------
    def settle(self, ref: JobRef) -> list[str]:
        return []  # DLC ends every pod of a finished job

    def stop(self, ref: JobRef) -> int:
        data = self.get(ref)
        if data is None or backend.is_terminal(data) or data.get("Status") == "Stopping":
            return 0
        try:
            self.client.stop_job(str(data["JobId"]))
        except PaiError as exc:
            if exc.not_found:
                return 0
            raise
        return 1

    def delete(self, ref: JobRef) -> None:
        job_id = self._job_id(ref)
        if not job_id:
            return
        self.stop(ref)
        try:
            self.client.delete_job(job_id)
        except PaiError as exc:
            if not exc.not_found:
                raise

    def claim(self, ref: JobRef, try_number: int) -> None:
        job_id = self._job_id(ref)
        if job_id:
            self.client.tag_job(job_id, {backend.CLAIMED_TRY: str(try_number)})

    # -- for people: the job CLI and the report page -------------------------------------
    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        """The workspace's dlc-airflow jobs of the last FIND_WINDOW (ListJobs needs a start)."""
        found = []
        for item in self._list(_managed()):
            info = JobInfo.of(self._ref_of(item), _tags(item), created=parse_time(item.get("GmtCreateTime")))
            if info.matches(dag_id, task_id, run_id):
                found.append(info)
        return found

    def spec(self, ref: JobRef) -> dict[str, Any] | None:
        return None  # a DLC job has no place for our spec (its tags hold 128 characters)

    def replicas(self, ref: JobRef) -> list[Replica]:
        data = self.get(ref)
        return replicas_from_pods(backend.pods(data)) if data else []

    def owner_try(self, ref: JobRef) -> int | None:
        data = self.get(ref)
        if data is None:
            return None
        tags = _tags(data)
        tries = [int(v) for v in (tags.get(LABEL_TRY), tags.get(backend.CLAIMED_TRY)) if v and v.isdigit()]
        return max(tries) if tries else None


def status_of(ref: JobRef, data: dict[str, Any] | None) -> JobStatus:
    if data is None:
        return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND,
                         message=f"DLC job {ref.name} ({ref.uid or 'no id'}) not found in workspace {ref.namespace}")
    return backend.status(data)


def after_tail(lines: list[str], tail: list[str]) -> list[str]:
    """The lines after the last place `tail` (the lines logged last time) ends in `lines`."""
    if not tail:
        return list(lines)
    for size in range(min(len(tail), len(lines)), 0, -1):
        end = tail[-size:]
        for at in range(len(lines) - size, -1, -1):
            if lines[at:at + size] == end:
                return list(lines[at + size:])
    return list(lines)


def event_of(ref: JobRef, text: str, index: int) -> dict[str, Any]:
    """A GetJobEvents string in the shape the waits log events in (waiting.describe_event)."""
    import hashlib

    lowered = text.lower()
    warning = any(word in lowered for word in ("fail", "error", "warning", "evict", "oom", "restart"))
    return {
        "metadata": {"uid": hashlib.sha256(text.encode()).hexdigest()[:16]},
        "involvedObject": {"kind": "DLCJob", "name": ref.name},
        "reason": "DLC", "message": text, "type": "Warning" if warning else "Normal",
        "lastTimestamp": f"{index:08d}",  # keeps DLC's order
    }


def _tags(data: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((data.get("Settings") or {}).get("Tags") or {}).items()}


def _managed() -> dict[str, str]:
    from dlc_airflow.naming import MANAGED_BY, MANAGER

    return {MANAGED_BY: MANAGER}


def _rank(pod: dict[str, Any]) -> tuple[int, int]:
    role = pod["metadata"]["labels"].get("dlc-airflow/role", "")
    index = int(pod["metadata"]["annotations"].get(backend.COMPLETION_INDEX, "0") or 0)
    return (0 if role in ("master", "chief", "launcher", "head") else 1, index)


class PaiFollower:
    """Reports a job's status changes from the workspace's shared poller (no GetJob per job)."""

    def __init__(self, runner: PaiRunner, ref: JobRef) -> None:
        self.runner, self.ref = runner, ref
        self._unsubscribe: Any = None
        self._last: tuple[Any, ...] | None = None
        self._lock = threading.Lock()

    def start(self, on_status: OnStatus) -> None:
        job_id = self.runner._job_id(self.ref)
        if not job_id:
            on_status(status_of(self.ref, None), [])
            return
        poller = self.runner.registry.get(self.runner.settings, self.runner.client)

        def receive(data: dict[str, Any] | None) -> None:
            current = status_of(self.ref, data)
            pods = backend.pods(data or {})
            key = (current.model_dump_json(), tuple((p["metadata"]["name"], p["status"]["phase"]) for p in pods))
            with self._lock:
                if key == self._last:
                    return
                self._last = key
            on_status(current, pods)

        self._unsubscribe = poller.subscribe(job_id, receive)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
