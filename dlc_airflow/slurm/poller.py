"""One shared poller per Slurm cluster (slurmrestd URL and user) per process.

slurmrestd has no watch. Waiting on N jobs with one GET /job/{id} each would cost N requests
per interval; here a follower only registers interest in a job id, and the cluster's poller
lists the jobs once per interval (GET /jobs: one request, whatever N) and hands each
followed job's record to its followers. Requests per hour are 3600 / interval for the whole
process: per waiting job-hour they fall as 1/N (benchmarks/slurm_poller.py).

- The subscription and the loop are dlc_airflow.polling's (shared with the DLC poller): a
  finished job is noticed within one interval (default 2 s, the connection's extra
  poll_interval).
- A failed list (slurmrestd restarting, a network blip) is logged and retried with the
  interval doubled, up to MAX_BACKOFF; the first good list brings it back. Followers keep
  the last status they had meanwhile.
- A job missing from the list (slurmctld purged it after MinJobAge) is handed over as None.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dlc_airflow.polling import Interest, SharedPoller
from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.client import SlurmClient, SlurmError

log = logging.getLogger(__name__)

Receiver = Callable[[JobRecord | None], None]

MAX_BACKOFF = 30.0


class ClusterPoller(SharedPoller[int, Interest]):
    def __init__(self, client: SlurmClient, interval: float) -> None:
        super().__init__()
        self.name = f"slurm-poller-{client.settings.url}"
        self.client = client
        self.interval = interval
        self.failures = 0
        self._wait = interval

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
            records = {r.job_id: r for r in self.client.jobs()}
        except SlurmError as exc:
            self.failures += 1
            self._wait = min(MAX_BACKOFF, max(self._wait * 2, self.interval))
            log.warning("Slurm poller: listing jobs failed (%s); trying again in %.0fs", exc, self._wait)
            return
        self._wait = self.interval
        for job_id in wanted:
            self.deliver(job_id, records.get(job_id))


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
