"""Where queued jobs stand: Kueue's visibility API, read once per LocalQueue for everyone.

Every wait on a queued job asks (about every 10 s) where it stands; the answer for a queue is
the same for all of them, so this process keeps one reader per (cluster, namespace, LocalQueue)
that reads the queue's pending workloads at most every READ_EVERY seconds, and the namespace's
Workloads (for the GPUs the ones ahead ask for) with it. 1,000 waits in one queue cost one
request per READ_EVERY, not 1,000. A cluster without the visibility API, or an identity not
allowed to read it, gets an empty answer (and one request per BACKOFF).
"""

from __future__ import annotations

import threading
import time

from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.k8s.kinds import WORKLOAD

READ_EVERY = 5.0
BACKOFF = 60.0  # after a refusal (no visibility API, no permission)
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
        with lock:  # the callers of one queue wait for one read
            now = time.monotonic()
            if (hit := self._read.get(key)) is not None and now < hit[0]:
                return hit[1], hit[2]
            try:
                self.requests += 1
                answer = client.call("GET", f"{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads")
                pending: list[Manifest] = list(answer.get("items") or [])
                workloads = client.list(WORKLOAD, namespace)[0] if pending else []
                self._read[key] = (now + READ_EVERY, pending, workloads)
            except KubeError:
                self._read[key] = (now + BACKOFF, [], [])
            return self._read[key][1], self._read[key][2]


PENDING = PendingWorkloads()
