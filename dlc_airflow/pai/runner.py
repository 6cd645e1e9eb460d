"""PaiRunner: the runner contract (dlc_airflow.runner.JobRunner) on a DLC workspace.

A JobRef's place is the workspace id and its uid the DLC JobId. Idempotency: the
DisplayName is our deterministic job name and the job's tags carry the task identity, so a
retried task finds its jobs with one ListJobs (Tags filter) and `submit` adopts a job of
that name instead of creating a second one. DLC creates a job in one call: a refused
CreateJob leaves nothing behind.

    runner = make_runner(Reach("pai_default"))          # reads the dlc_pai connection

Capabilities: events (GetJobEvents); DLC keeps no spec of ours, and ends every pod of a
finished job itself (nothing to settle). stop is StopJob (the job stays, Stopped); delete
stops it, then DeleteJob.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

from dlc_airflow import reasons
from dlc_airflow.errors import BackendError, OwnershipError, SubmitError
from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSON, JSONObject
from dlc_airflow.naming import LABEL_ATTEMPT, LABEL_JOB, LABEL_TASK_KEY, LABEL_TRY, TaskIdentity
from dlc_airflow.pai import backend
from dlc_airflow.pai.client import PaiClient, PaiError
from dlc_airflow.pai.poller import REGISTRY, PollerRegistry, iso
from dlc_airflow.pai.settings import PaiSettings, get_connection, settings_from
from dlc_airflow.polling import Observed, PolledFollower
from dlc_airflow.runner import Event, LogLine, LogPositions, Outputs, Reach, Replica, merge_outputs, replica_order
from dlc_airflow.runtime.metrics import parse_metric_line
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, parse_time

log = logging.getLogger(__name__)

PAI = backend.NAME
FIND_WINDOW = timedelta(days=30)  # how far back a retried task looks for the jobs it made
LOG_LINES = 2000  # GetPodLogs' default page
LOG_OVERLAP = timedelta(seconds=60)  # each log read starts this far before the last one
LOG_TAIL = 20  # lines remembered per pod to find where the last read ended


def make_runner(reach: Reach) -> PaiRunner:
    """The registry's runner factory: the runner of the connection's workspace (the place a
    task names overrides it); the connection is read unless the caller has it already."""
    connection = reach.connection if reach.connection is not None else get_connection(reach.conn_id)
    return PaiRunner(settings_from(reach.conn_id, connection, reach.place))


class PaiRunner:
    backend_name = PAI

    def __init__(self, settings: PaiSettings, client: PaiClient | None = None,
                 registry: PollerRegistry = REGISTRY) -> None:
        self.settings = settings
        self.place = settings.workspace_id
        self.client = client or PaiClient(settings)
        self.registry = registry

    # -- refs --------------------------------------------------------------------------
    def ref(self, job: DLCJob | None, name: str, attempt: int = 1, uid: str = "") -> JobRef:
        return JobRef(backend=PAI, place=self.place, name=name, attempt=attempt, uid=uid)

    def _ref_of(self, item: JSONObject) -> JobRef:
        tags = _tags(item)
        attempt = tags.get(LABEL_ATTEMPT, "1")
        return self.ref(None, tags.get(LABEL_JOB) or item.get("DisplayName", ""),
                        int(attempt) if attempt.isdigit() else 1, uid=str(item.get("JobId", "")))

    def _list(self, tags: dict[str, str]) -> list[JSONObject]:
        """Every live job of the workspace carrying `tags` (all pages)."""
        found: list[JSONObject] = []
        page, size = 1, self.settings.list_page_size
        start = iso(datetime.now(UTC) - FIND_WINDOW)
        while True:
            items, total = self.client.list_jobs(WorkspaceId=self.place, Tags=tags, PageSize=size,
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
            fields = backend.render(job, name, identity, attempt, workspace_id=self.place,
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
                                         f"{self.place} and belongs to another task (task-key {theirs}, ours "
                                         f"{ours}); rename the job or stop that one")
                log.info("adopting existing DLC job %s (%s)", name, item.get("JobId"))
                return self._ref_of(item), False
            job_id = self.client.create_job(fields)
        except PaiError as exc:
            raise SubmitError(f"submitting job {name} to DLC workspace {self.place} failed: {exc}",
                              permanent=exc.permanent) from None
        return self.ref(job, name, attempt, uid=job_id), True

    # -- inspect -----------------------------------------------------------------------
    def _job_id(self, ref: JobRef) -> str | None:
        if ref.uid:
            return ref.uid
        found = self.lookup(ref.name)
        return found.uid if found else None

    def get(self, ref: JobRef) -> JSONObject | None:
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

    def follow(self, ref: JobRef) -> PolledFollower[str, JSONObject]:
        """Status changes from the workspace's shared poller (one ListJobs per interval for every
        job this process follows, no GetJob per job)."""
        def observe(data: JSONObject | None) -> Observed:
            return status_of(ref, data), backend.replicas(data or {})

        return PolledFollower(lambda: self.registry.get(self.settings, self.client), lambda: self._job_id(ref),
                              observe)

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        """New lines of each started pod (GetPodLogs).

        GetPodLogs gives lines without positions: each read starts LOG_OVERLAP before the
        previous one and skips up to the last lines already logged (the pod's tail).
        """
        positions = dict(since or {})
        job_id = self._job_id(ref)
        if not job_id:
            return [], positions
        if replicas is None:
            replicas = backend.replicas(self.get(ref) or {})
        lines: list[LogLine] = []
        for replica in replicas:
            if replica.state not in ("Running", "Succeeded", "Failed"):
                continue
            pod_id = replica.detail.get(backend.POD_ID, "")
            pos = positions.get(pod_id)
            pos = pos if isinstance(pos, dict) else {"since": replica.detail.get(backend.STARTED), "tail": []}
            since_time, kept = pos.get("since"), pos.get("tail")
            tail = [str(t) for t in kept] if isinstance(kept, list) else []
            asked = datetime.now(UTC)
            try:
                got = self.client.pod_logs(job_id, pod_id, start_time=str(since_time) if since_time else None,
                                           max_lines=LOG_LINES, pod_uid=replica.detail.get(backend.POD_UID) or None)
            except PaiError as exc:
                log.debug("no logs for %s yet: %s", pod_id, exc)
                continue
            new = after_tail(got, tail)
            lines.extend(LogLine(replica.name, line) for line in new)
            kept_tail: list[JSON] = [line for line in [*tail, *new][-LOG_TAIL:]]
            positions[pod_id] = {"since": iso(asked - LOG_OVERLAP), "tail": kept_tail}
        return lines, positions

    # -- the EventSource capability ----------------------------------------------------
    def events(self, ref: JobRef, seen: Collection[str] = ()) -> list[Event]:
        job_id = self._job_id(ref)
        if not job_id:
            return []
        try:
            raw = self.client.job_events(job_id)
        except PaiError as exc:
            log.debug("no events for %s: %s", ref.name, exc)
            return []
        return [e for e in (event_of(ref, text, i) for i, text in enumerate(raw)) if e.uid not in seen]

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        """Metrics the coordinator printed (`DLC_METRICS {...}` lines, the latest value of
        each): DLC keeps no termination message, so report_output's outputs stay empty."""
        candidates = replicas if replicas is not None else backend.replicas(self.get(ref) or {})
        if not candidates or not ref.uid:
            return merge_outputs([])
        first = sorted(candidates, key=replica_order)[0]
        try:
            lines = self.client.pod_logs(ref.uid, first.detail.get(backend.POD_ID, ""), max_lines=LOG_LINES,
                                         start_time=first.detail.get(backend.STARTED) or None)
        except PaiError as exc:
            log.debug("no logs for %s outputs: %s", ref.name, exc)
            return merge_outputs([])
        return merge_outputs({"metrics": record} for line in lines if (record := parse_metric_line(line)) is not None)

    # -- stop --------------------------------------------------------------------------
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

    def replicas(self, ref: JobRef) -> list[Replica]:
        data = self.get(ref)
        return backend.replicas(data) if data else []

    def owner_try(self, ref: JobRef) -> int | None:
        data = self.get(ref)
        if data is None:
            return None
        tags = _tags(data)
        tries = [int(v) for v in (tags.get(LABEL_TRY), tags.get(backend.CLAIMED_TRY)) if v and v.isdigit()]
        return max(tries) if tries else None


def status_of(ref: JobRef, data: JSONObject | None) -> JobStatus:
    if data is None:
        return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND,
                         message=f"DLC job {ref.name} ({ref.uid or 'no id'}) not found in workspace {ref.place}")
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


def event_of(ref: JobRef, text: str, index: int) -> Event:
    """A GetJobEvents string as an Event (in DLC's order)."""
    import hashlib

    lowered = text.lower()
    warning = any(word in lowered for word in ("fail", "error", "warning", "evict", "oom", "restart"))
    return Event(uid=hashlib.sha256(text.encode()).hexdigest()[:16], time=f"{index:08d}", object=f"DLCJob {ref.name}",
                 reason="DLC", message=text, warning=warning)


def _tags(data: JSONObject) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((data.get("Settings") or {}).get("Tags") or {}).items()}


def _managed() -> dict[str, str]:
    from dlc_airflow.naming import MANAGED_BY, MANAGER

    return {MANAGED_BY: MANAGER}
