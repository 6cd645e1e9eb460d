"""One shared poller per Slurm cluster (slurmrestd URL and user) per process.

slurmrestd has no watch. Waiting on N jobs with one GET /job/{id} each would cost N requests
per interval; here a follower only registers interest in a job id, and the cluster's poller
lists the jobs once per interval (GET /jobs: one request, whatever N) and hands each
followed job's record to its followers. Requests per hour are 3600 / interval for the whole
process: per waiting job-hour they fall as 1/N (benchmarks/slurm_poller.py).

- A new follower wakes the poller, so its first status comes at once (polls stay at least
  MIN_GAP apart however many followers arrive together): a finished job is noticed within
  one interval (default 2 s, the connection's extra poll_interval).
- A failed list (slurmrestd restarting, a network blip) is logged and retried with the
  interval doubled, up to MAX_BACKOFF; the first good list brings it back. Followers keep
  the last status they had meanwhile.
- A job missing from the list (slurmctld purged it after MinJobAge) is handed over as None.
- The thread ends when nobody follows anything; the next follower starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.client import SlurmClient, SlurmError

log = logging.getLogger(__name__)

Receiver = Callable[[JobRecord | None], None]

MIN_GAP = 0.05  # seconds between two lists, whatever wakes the poller
MAX_BACKOFF = 30.0


class ClusterPoller:
    def __init__(self, client: SlurmClient, interval: float) -> None:
        self.client = client
        self.interval = interval
        self.polls = 0
        self.failures = 0
        self._wait = interval
        self._jobs: dict[int, list[Receiver]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, job_id: int, receiver: Receiver) -> Callable[[], None]:
        with self._lock:
            self._jobs.setdefault(int(job_id), []).append(receiver)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"dlc-slurm-poller-{self.client.settings.url}")
                self._thread.start()
        self._wake.set()

        def unsubscribe() -> None:
            with self._lock:
                receivers = self._jobs.get(int(job_id))
                if receivers is not None and receiver in receivers:
                    receivers.remove(receiver)
                    if not receivers:
                        del self._jobs[int(job_id)]
            self._wake.set()

        return unsubscribe

    def following(self) -> list[int]:
        with self._lock:
            return list(self._jobs)

    def _run(self) -> None:
        last = 0.0
        while True:
            self._wake.wait(max(0.0, last + self._wait - time.monotonic()))
            self._wake.clear()
            with self._lock:
                if not self._jobs:
                    self._thread = None
                    return
            gap = last + MIN_GAP - time.monotonic()
            if gap > 0:
                time.sleep(gap)
            last = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # a wait must survive anything one poll meets
                log.exception("Slurm poller of %s: poll failed", self.client.settings.url)

    def poll_once(self) -> None:
        """One list for every followed job."""
        with self._lock:
            wanted = list(self._jobs)
        if not wanted:
            return
        self.polls += 1
        try:
            records = {r.job_id: r for r in self.client.jobs()}
        except SlurmError as exc:
            self.failures += 1
            self._wait = min(MAX_BACKOFF, max(self._wait * 2, self.interval))
            log.warning("Slurm poller: listing jobs failed (%s); trying again in %.0fs", exc, self._wait)
            return
        self._wait = self.interval
        for job_id in wanted:
            with self._lock:
                receivers = list(self._jobs.get(job_id, ()))
            for receiver in receivers:
                try:
                    receiver(records.get(job_id))
                except Exception:  # one follower's failure is not the others'
                    log.exception("Slurm poller: a follower of job %s failed", job_id)


_pollers: dict[tuple[str, str], ClusterPoller] = {}
_pollers_lock = threading.Lock()


def poller_for(client: SlurmClient) -> ClusterPoller:
    """The process's poller of the client's cluster (made with this client the first time)."""
    key = client.settings.cluster_key
    with _pollers_lock:
        poller = _pollers.get(key)
        if poller is None:
            poller = _pollers[key] = ClusterPoller(client, client.settings.poll_interval)
        return poller
