"""Where queued jobs stand: Kueue's visibility API, read once per LocalQueue for everyone.

Every wait on a queued job asks (about every 10 s) where it stands; the answer for a queue is
the same for all of them, so this process keeps one reader per (cluster, namespace, LocalQueue)
that reads the queue's pending workloads at most every READ_EVERY seconds, and the namespace's
Workloads (for the GPUs the ones ahead ask for) with it. 1,000 waits in one queue cost one
read per READ_EVERY, not 1,000 (a read: the queue's pending list, and the namespace's Workloads
when some are pending). A cluster without the visibility API, an identity not allowed to read
it, or a slow answer gives an empty answer (and one try per BACKOFF).
"""

from __future__ import annotations

import threading
import time

from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.kinds import WORKLOAD

READ_EVERY = 5.0
BACKOFF = 60.0  # after a refusal or an error (no visibility API, no permission)
TIMEOUT = 5.0  # seconds for the read: the waits of the queue wait for it
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"

Key = tuple[str, str, str]  # (cluster, namespace, LocalQueue)


class PendingWorkloads:
    """The shared readers of this process (PENDING)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Key, threading.Lock] = {}
        self._read: dict[Key, tuple[float, list[Manifest], list[Manifest]]] = {}
        self.requests = 0  # visibility API reads made (benchmarks and tests count them)

    def read(self, client: KubeClient, cluster: str, namespace: str, queue: str) -> tuple[list[Manifest], list[Manifest]]:
        """The queue's pending workloads (Kueue's order) and the namespace's Workloads, at most
        READ_EVERY seconds old; ([], []) where they cannot be read."""
        key = (cluster, namespace, queue)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # the callers of one queue wait for one read (short: no retries, a timeout)
            now = time.monotonic()
            if (hit := self._read.get(key)) is not None and now < hit[0]:
                return hit[1], hit[2]
            with self._lock:
                self.requests += 1
            try:
                answer = client.call("GET", f"{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads",
                                     retry=False, timeout=TIMEOUT)
                pending: list[Manifest] = list(answer.get("items") or [])
                workloads = client.list(WORKLOAD, namespace)[0] if pending else []
                self._read[key] = (now + READ_EVERY, pending, workloads)
            except Exception:  # noqa: BLE001 - no visibility API, no permission, a slow server: say nothing
                self._read[key] = (now + BACKOFF, [], [])
            return self._read[key][1], self._read[key][2]


PENDING = PendingWorkloads()
