"""One shared poller per DLC workspace per process: ListJobs once per interval for every job
any wait in the process follows.

DLC has no watch. Waiting on N jobs with GetJob each would cost N requests per interval
(and trip the API's flow control); here a follower only registers interest in a job id,
and the workspace's poller asks ListJobs for all of them at once (JobIds=a,b,c, one request
per `list_page_size` jobs), then hands each job's entry to its followers.

- The subscription and the loop are dlc_airflow.polling's (shared with the Slurm poller).
- Throttling (the API's Throttling.* codes, or a retry-after) doubles the interval up to
  poll_max_interval, honouring retry-after; each good poll halves it back towards the base.
- A job missing from two answers in a row (deleted, or older than the list's time window)
  is read once with GetJob: its answer, or None for "gone", goes to the followers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pai.client import PaiClient, PaiError
from dlc_airflow.pai.settings import PaiSettings
from dlc_airflow.polling import Interest, SharedPoller

log = logging.getLogger(__name__)

# data: the job's ListJobs item / GetJob body (API field names), or None once it is gone
Receiver = Callable[[JSONObject | None], None]

WINDOW = timedelta(days=7)  # ListJobs filters by creation time: look this far before a job was followed
MISSES_BEFORE_GET = 2


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Interest(Interest):
    def __init__(self, since: datetime) -> None:
        super().__init__()
        self.since = since  # the job exists no earlier than this minus WINDOW
        self.misses = 0


class WorkspacePoller(SharedPoller[str, _Interest]):
    def __init__(self, client: PaiClient, settings: PaiSettings, on_idle: Callable[[WorkspacePoller], None] | None = None):
        super().__init__()
        self.name = f"pai-poller-{settings.workspace_id}"
        self.client = client
        self.settings = settings
        self.interval = settings.poll_interval
        self.requests = 0
        self.throttled = 0
        self._on_idle = on_idle

    def new_interest(self, job_id: str) -> _Interest:
        return _Interest(datetime.now(UTC))

    def delay(self) -> float:
        return self.interval

    def on_idle(self) -> None:
        if self._on_idle is not None:
            self._on_idle(self)

    def poll_once(self) -> None:
        """One round: ListJobs for every followed job, GetJob for those missing twice."""
        wanted = {job_id: interest.since for job_id, interest in self.wanted().items()}
        if not wanted:
            return
        self.polls += 1
        seen: dict[str, JSONObject] = {}
        ids = sorted(wanted)
        size = max(1, self.settings.list_page_size)
        try:
            for start in range(0, len(ids), size):
                chunk = ids[start:start + size]
                oldest = min(wanted[i] for i in chunk) - WINDOW
                seen.update(self._list(chunk, oldest))
        except PaiError as exc:
            self._failed(exc)
            return
        self._recovered()
        missing = []
        with self._lock:
            for job_id in ids:
                interest = self._jobs.get(job_id)
                if interest is None:
                    continue
                if job_id in seen:
                    interest.misses = 0
                else:
                    interest.misses += 1
                    if interest.misses >= MISSES_BEFORE_GET:
                        missing.append(job_id)
        for job_id, data in seen.items():
            self.deliver(job_id, data)
        for job_id in missing:
            self._confirm(job_id)

    def _list(self, chunk: list[str], oldest: datetime) -> dict[str, JSONObject]:
        found: dict[str, JSONObject] = {}
        page = 1
        while True:
            self.requests += 1
            items, total = self.client.list_jobs(
                WorkspaceId=self.settings.workspace_id, JobIds=",".join(chunk), PageSize=len(chunk),
                PageNumber=page, StartTime=iso(oldest), EndTime=iso(datetime.now(UTC) + timedelta(minutes=5)))
            for item in items:
                if item.get("JobId") in chunk and not item.get("IsDeleted"):
                    found[item["JobId"]] = item
            # a server that pages smaller than asked: follow its TotalCount
            if not items or page * len(chunk) >= total or len(found) >= len(chunk):
                return found
            page += 1

    def _confirm(self, job_id: str) -> None:
        try:
            self.requests += 1
            data: JSONObject | None = self.client.get_job(job_id)
        except PaiError as exc:
            if not exc.not_found:
                log.warning("DLC poller: GetJob %s: %s", job_id, exc)
                return
            data = None
        with self._lock:
            interest = self._jobs.get(job_id)
            if interest is not None:
                interest.misses = 0
                created = (data or {}).get("GmtCreateTime")
                if created:  # found outside the list's window: widen it for this job
                    try:
                        interest.since = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
                    except ValueError:
                        pass
        self.deliver(job_id, data)

    def _failed(self, exc: PaiError) -> None:
        if exc.throttled:
            self.throttled += 1
            wait = max(self.interval * 2, exc.retry_after or 0.0)
            self.interval = min(self.settings.poll_max_interval, wait)
            log.warning("DLC throttled ListJobs in workspace %s (%s): polling every %.1fs",
                        self.settings.workspace_id, exc.code or "retry-after", self.interval)
        else:
            log.warning("DLC poller of workspace %s: %s", self.settings.workspace_id, exc)

    def _recovered(self) -> None:
        if self.interval > self.settings.poll_interval:
            self.interval = max(self.settings.poll_interval, self.interval / 2)


class PollerRegistry:
    """The process's pollers, one per PaiSettings.key() (endpoint, region, workspace, identity)."""

    def __init__(self) -> None:
        self._pollers: dict[str, WorkspacePoller] = {}
        self._lock = threading.Lock()

    def get(self, settings: PaiSettings, client: PaiClient) -> WorkspacePoller:
        key = settings.key()
        with self._lock:
            poller = self._pollers.get(key)
            if poller is None:
                poller = self._pollers[key] = WorkspacePoller(client, settings, on_idle=self._idle)
            return poller

    def _idle(self, poller: WorkspacePoller) -> None:
        with self._lock:
            key = poller.settings.key()
            if self._pollers.get(key) is poller and not poller.following():
                del self._pollers[key]

    def pollers(self) -> list[WorkspacePoller]:
        with self._lock:
            return list(self._pollers.values())


REGISTRY = PollerRegistry()
