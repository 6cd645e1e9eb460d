"""One shared poller per Slurm cluster (slurmrestd URL, user and credential) per process.

slurmrestd has no watch. Waiting on N jobs with one GET /job/{id} each would cost N requests
per interval; here a follower only registers interest in a job id, and the cluster's poller
asks once per interval for all of them and hands each followed job's record to its
followers. Requests per hour are 3600 / interval for the whole process: per waiting job-hour
they fall as 1/N (benchmarks/slurm_poller.py). What one poll asks:

- before v0.0.42: GET /jobs, every job slurmctld remembers (MinJobAge): its cost grows with
  the cluster's history, not with what is followed;
- v0.0.42+ (Slurm 24.11+): GET /jobs/state/ for the followed jobs only (their id and state),
  then GET /job/{id} for each one whose state changed (or that pends: at every poll until
  slurmctld gives its pending reason, then every PENDING_REFRESH seconds, since the reason
  changes without the state). When more than FULL_LIST_OVER records are wanted at once (a
  triggerer taking over many waits), one GET /jobs instead.

- The subscription and the loop are dlc_airflow.polling's (shared with the DLC poller): a
  finished job is noticed within one interval (default 2 s, the connection's extra
  poll_interval).
- A failed list (slurmrestd restarting, a network blip) is logged and retried with the
  interval doubled, up to MAX_BACKOFF; the first good list brings it back. Followers keep
  the last status they had meanwhile.
- A refused token (expired, revoked) is different: no retry of the same token helps. A token
  file gets the connection's token_grace to be rotated (the client reads it again when it
  changes, so the list is retried at the base interval); after that, or at once for a token
  in the connection's password, every follower is handed the SlurmError: its wait ends with it.
- A job missing from the list (slurmctld purged it after MinJobAge) is handed over as None.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dlc_airflow.polling import Interest, SharedPoller
from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.client import SlurmClient, SlurmError

log = logging.getLogger(__name__)

# a job's record; None once it is no longer listed; the SlurmError that ends every wait
Receiver = Callable[[JobRecord | SlurmError | None], None]

MAX_BACKOFF = 30.0
PENDING_REFRESH = 15.0  # seconds between two records of a job that pends (its reason may change)
FULL_LIST_OVER = 20  # more records than this wanted in one poll: one full list costs less


class _Known:
    """A followed job's last state (from /jobs/state/) and the record read for it."""

    def __init__(self, states: tuple[str, ...], record: JobRecord, at: float) -> None:
        self.states, self.record, self.at = states, record, at


def _pending_reason_due(known: _Known, now: float) -> bool:
    """A pending job's reason changes without its state: read its record again at every poll
    until slurmctld has given a reason (it had not evaluated the job yet), then every
    PENDING_REFRESH seconds."""
    return known.record.reason in ("", "None") or now - known.at >= PENDING_REFRESH


class ClusterPoller(SharedPoller[int, Interest]):
    def __init__(self, client: SlurmClient, interval: float) -> None:
        super().__init__()
        self.name = f"slurm-poller-{client.settings.url}"
        self.client = client
        self.interval = interval
        self.failures = 0
        self._wait = interval
        self._refused_since: float | None = None  # the first refused list of a run of them
        self._known: dict[int, _Known] = {}  # (v0.0.42+) followed jobs' states and records

    def new_interest(self, job_id: int) -> Interest:
        return Interest()

    def delay(self) -> float:
        return self._wait

    def subscribe(self, job_id: int, receiver: Receiver) -> Callable[[], None]:
        return super().subscribe(int(job_id), receiver)

    def poll_once(self) -> None:
        """One list for every followed job."""
        wanted = self.wanted()
        if not wanted:
            return
        self.polls += 1
        try:
            records = self._records(list(wanted))
        except SlurmError as exc:
            self.failures += 1
            if exc.kind == "auth":
                self._refused(exc, list(wanted))
                return
            self._wait = min(MAX_BACKOFF, max(self._wait * 2, self.interval))
            log.warning("Slurm poller: listing jobs failed (%s); trying again in %.0fs", exc, self._wait)
            return
        self._wait = self.interval
        self._refused_since = None
        for job_id in wanted:
            self.deliver(job_id, records.get(job_id))

    def _records(self, wanted: list[int]) -> dict[int, JobRecord]:
        """The followed jobs' records (a job slurmctld does not know is missing)."""
        if not self.client.api.has_job_states:
            return {r.job_id: r for r in self.client.jobs()}
        states = self.client.job_states(wanted)
        now = time.monotonic()
        stale = [job_id for job_id, state in states.items()
                 if (known := self._known.get(job_id)) is None or known.states != state
                 or ("PENDING" in state and _pending_reason_due(known, now))]
        if len(stale) > FULL_LIST_OVER:
            listed = {r.job_id: r for r in self.client.jobs()}
            fresh = {job_id: listed[job_id] for job_id in stale if job_id in listed}
        else:
            fresh = {job_id: record for job_id in stale if (record := self.client.job(job_id)) is not None}
        for job_id, record in fresh.items():
            self._known[job_id] = _Known(states[job_id], record, now)
        self._known = {job_id: known for job_id, known in self._known.items() if job_id in states}
        return {job_id: known.record for job_id, known in self._known.items()}

    def _refused(self, exc: SlurmError, wanted: list[int]) -> None:
        """The token was refused: wait for a rotated token file, else end every wait with it."""
        now = time.monotonic()
        if self._refused_since is None:
            self._refused_since = now
        self._wait = self.interval
        settings = self.client.settings
        left = settings.token_grace - (now - self._refused_since)
        if settings.token_file and not settings.token and left > 0:
            log.warning("Slurm poller: %s; waiting up to %.0fs more for %s to be rotated", exc, left,
                        settings.token_file)
            return
        for job_id in wanted:
            self.deliver(job_id, exc)


_pollers: dict[tuple[str, str, str], ClusterPoller] = {}
_pollers_lock = threading.Lock()


def poller_for(client: SlurmClient) -> ClusterPoller:
    """The process's poller of the client's cluster (made with this client the first time)."""
    key = client.settings.cluster_key
    with _pollers_lock:
        poller = _pollers.get(key)
        if poller is None:
            poller = _pollers[key] = ClusterPoller(client, client.settings.poll_interval)
        return poller
