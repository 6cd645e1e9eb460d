"""The shared poller of backends without watches (Slurm, the managed DLC service).

A follower only registers interest in a job id; one thread per cluster or workspace per
process polls once per interval for every followed job (a subclass's `poll_once`, one list
request whatever the number of jobs) and hands each job's data to its followers with
`deliver`. A new follower wakes the poller, so its first status comes at once (polls stay at
least MIN_GAP apart however many followers arrive together). The thread ends when nobody
follows anything; the next follower starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from dlc_airflow.jobref import JobRef
from dlc_airflow.runner import JobRunner, OnStatus, Replica
from dlc_airflow.status import JobStatus

log = logging.getLogger(__name__)

MIN_GAP = 0.05  # seconds between two polls, whatever wakes the poller

K = TypeVar("K", bound=Hashable)
Receiver = Callable[[Any], None]


class Interest:
    """The followers of one job (subclasses keep more per job: since when, misses...)."""

    def __init__(self) -> None:
        self.receivers: list[Receiver] = []


In = TypeVar("In", bound=Interest)


class SharedPoller(Generic[K, In]):
    name = "poller"  # for thread names and log lines

    def __init__(self) -> None:
        self.polls = 0
        self._jobs: dict[K, In] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what a subclass says ------------------------------------------------------------
    def new_interest(self, job_id: K) -> In:
        raise NotImplementedError

    def poll_once(self) -> None:
        """One round for every followed job (`wanted()`), handing data out with `deliver`."""
        raise NotImplementedError

    def delay(self) -> float:
        """Seconds until the next poll (a subclass backs off here)."""
        raise NotImplementedError

    def on_idle(self) -> None:
        """The thread ended: nobody follows anything."""

    # -- followers -----------------------------------------------------------------------
    def subscribe(self, job_id: K, receiver: Receiver) -> Callable[[], None]:
        with self._lock:
            interest = self._jobs.get(job_id)
            if interest is None:
                interest = self._jobs[job_id] = self.new_interest(job_id)
            interest.receivers.append(receiver)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True, name=f"dlc-{self.name}")
                self._thread.start()
        self._wake.set()

        def unsubscribe() -> None:
            with self._lock:
                current = self._jobs.get(job_id)
                if current is not None and receiver in current.receivers:
                    current.receivers.remove(receiver)
                    if not current.receivers:
                        del self._jobs[job_id]
            self._wake.set()

        return unsubscribe

    def following(self) -> list[K]:
        with self._lock:
            return list(self._jobs)

    def wanted(self) -> dict[K, In]:
        with self._lock:
            return dict(self._jobs)

    def deliver(self, job_id: K, data: Any) -> None:
        with self._lock:
            interest = self._jobs.get(job_id)
            receivers = list(interest.receivers) if interest else []
        for receiver in receivers:
            try:
                receiver(data)
            except Exception:  # one follower's bug must not starve the others
                log.exception("%s: a follower of job %s failed", self.name, job_id)

    def stop(self) -> None:
        """Forget every follower and end the thread (tests, shutdown)."""
        with self._lock:
            self._jobs.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(5)

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        last = 0.0
        while True:
            self._wake.wait(max(0.0, last + self.delay() - time.monotonic()))
            self._wake.clear()
            with self._lock:
                if not self._jobs:
                    self._thread = None
                    break
            gap = last + MIN_GAP - time.monotonic()
            if gap > 0:
                time.sleep(gap)
            last = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # a wait must survive anything one poll meets
                log.exception("%s: poll failed", self.name)
        self.on_idle()


D = TypeVar("D")
Observed = tuple[JobStatus, Sequence[Replica]]


class PolledFollower(Generic[K, D]):
    """A job's status changes from its backend's shared poller (the Follower of the watch-less
    backends). `job_id()` is the poller's key for the job (None: it has none, it is gone);
    `observe(data)` what the poller delivered (None: the job is no longer listed) as a status
    and replicas. Only changes are reported."""

    def __init__(self, poller: Callable[[], SharedPoller[K, Any]], job_id: Callable[[], K | None],
                 observe: Callable[[D | None], Observed]) -> None:
        self._poller, self._job_id, self._observe = poller, job_id, observe
        self._unsubscribe: Callable[[], None] | None = None
        self._last: Observed | None = None
        self._lock = threading.Lock()

    def start(self, on_status: OnStatus) -> None:
        key = self._job_id()
        if key is None:
            on_status(*self._observe(None))
            return

        def receive(data: D | None) -> None:
            current = self._observe(data)
            with self._lock:
                if current == self._last:
                    return
                self._last = current
            on_status(*current)

        self._unsubscribe = self._poller().subscribe(key, receive)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


class StatusFollower:
    """A job's status changes, asking its runner every `interval` seconds in a thread of its
    own: for jobs whose state is cheap to read on this host (the local backend's job folder).
    Reports the job's replicas with each change."""

    def __init__(self, runner: JobRunner, ref: JobRef, interval: float) -> None:
        self.runner, self.ref, self.interval = runner, ref, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_status: OnStatus) -> None:
        def poll() -> None:
            last = None
            while not self._stop.is_set():
                status = self.runner.status(self.ref)
                if status != last:
                    on_status(status, self.runner.replicas(self.ref))
                    last = status
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=poll, daemon=True, name=f"dlc-follow-{self.ref.name}")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(2)
