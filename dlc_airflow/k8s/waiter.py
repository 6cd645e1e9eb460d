"""Follow one job's status through the process's shared watches.

A waiter subscribes to the shared watch of the job's kind and of pods in its namespace
(see watch.py: one list+watch each per namespace, whatever the number of waiters), and
turns every change into a JobStatus with the backend's pure status mapping. Status
callbacks run in the watch threads; `SyncWaiter` and the trigger hand them to a queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dlc_airflow.k8s.kinds import POD
from dlc_airflow.k8s.runner import JobRef, KubeRunner
from dlc_airflow.k8s.watch import REGISTRY, JobObjects, SharedWatch, WatchRegistry
from dlc_airflow.status import JobState, JobStatus

OnStatus = Callable[[JobStatus, list[dict]], None]


class JobWaiter:
    def __init__(self, runner: KubeRunner, ref: JobRef, cluster_key: str, *,
                 registry: WatchRegistry = REGISTRY):
        self.runner, self.ref = runner, ref
        self.registry = registry
        self._keys = [(cluster_key, ref.namespace, ref.kind), (cluster_key, ref.namespace, POD)]
        self._lock = threading.Lock()
        self._objects: JobObjects | None = None
        self._pods: JobObjects | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._on_status: OnStatus | None = None
        self.last: JobStatus | None = None

    def start(self, on_status: OnStatus) -> None:
        self._on_status = on_status
        for key, target in zip(self._keys, ("_objects", "_pods")):
            watch = self.registry.get(key, lambda k=key: SharedWatch(self.runner.client, k[1], k[2]))
            self._unsubscribe.append(watch.subscribe(self.ref.name, self._receiver(target)))

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        for key in self._keys:
            self.registry.release(key)

    def _receiver(self, target: str) -> Callable[[JobObjects], None]:
        def receive(objs: JobObjects) -> None:
            with self._lock:
                setattr(self, target, objs)
                if self._objects is None or self._pods is None:
                    return  # both watches must have answered once
                status, pods = self._status()
                self.last = status
            if self._on_status:
                self._on_status(status, pods)
        return receive

    def _status(self) -> tuple[JobStatus, list[dict]]:
        objs, pods = self._objects, self._pods
        live_pods = list(pods.live.values()) if pods else []
        if objs.live:
            return self.runner.backend.status(list(objs.live.values()), live_pods), live_pods
        if objs.deleted:
            final = self.runner.backend.status(list(objs.deleted.values()), live_pods)
            if final.terminal:
                return final, live_pods
            return JobStatus(state=JobState.STOPPED, reason="Deleted",
                             message=f"{self.ref.kind.kind} {self.ref.name} was deleted before it finished"), live_pods
        # Not in the watch cache: just created and not yet seen, or really gone. Ask.
        current = self.runner.objects(self.ref)
        if current:
            return self.runner.backend.status(current, live_pods), live_pods
        return JobStatus(state=JobState.STOPPED, reason="NotFound",
                         message=f"{self.ref.kind.kind} {self.ref.name} not found in namespace {self.ref.namespace}"), live_pods

    def watch_stats(self) -> list[Any]:
        watches = self.registry.watches()
        return [watches[k].stats for k in self._keys if k in watches]


class SyncWaiter:
    """Blocking wait for the next status change (for in-process waits on a worker)."""

    def __init__(self, waiter: JobWaiter):
        self.waiter = waiter
        self._cond = threading.Condition()
        self._latest: tuple[JobStatus, list[dict]] | None = None
        self._version = 0

    def __enter__(self) -> SyncWaiter:
        self.waiter.start(self._push)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.waiter.close()

    def _push(self, status: JobStatus, pods: list[dict]) -> None:
        with self._cond:
            self._latest = (status, pods)
            self._version += 1
            self._cond.notify_all()

    def next(self, seen_version: int, timeout: float) -> tuple[int, tuple[JobStatus, list[dict]] | None]:
        """Wait until a status newer than `seen_version` arrives (or timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: self._version > seen_version, timeout)
            return self._version, self._latest
