"""Follow one job's status through the process's shared watches.

A waiter subscribes to the shared watch of the job's kind and of pods in its namespace
(see watch.py: one list+watch each per namespace, whatever the number of waiters), and of
Kueue's Workloads for a queued job (backends/kueue.py: Kueue's reason while it waits), and
turns every change into a JobStatus with the backend's pure status mapping. It also keeps
the job's Events in the namespace's shared Event watch, where KubeRunner.events reads them
(no list per job). Status callbacks run in the watch threads; the waits hand them to a queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from dlc_airflow import reasons
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.api import Pod, as_pods
from dlc_airflow.k8s.backends import kueue
from dlc_airflow.k8s.backends.base import Backend
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.kinds import EVENT, POD, WORKLOAD, ResourceKind
from dlc_airflow.k8s.pods import replicas_of
from dlc_airflow.k8s.watch import REGISTRY, JobObjects, SharedWatch, WatchRegistry, event_job
from dlc_airflow.naming import LABEL_JOB
from dlc_airflow.runner import OnStatus
from dlc_airflow.status import JobState, JobStatus


class JobWaiter:
    """The Follower of the Kubernetes backends (see dlc_airflow.runner)."""

    def __init__(self, client: KubeClient, backend: Backend, ref: JobRef, kind: ResourceKind, cluster_key: str, *,
                 registry: WatchRegistry = REGISTRY):
        self.client, self.backend, self.ref, self.kind = client, backend, ref, kind
        self.registry = registry
        self._keys = [(cluster_key, ref.place, kind), (cluster_key, ref.place, POD)]
        self._lock = threading.Lock()
        self._objects: JobObjects | None = None
        self._pods: JobObjects | None = None
        self._workloads: JobObjects | None = None
        self._workloads_key: tuple[str, str, ResourceKind] | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._on_status: OnStatus | None = None
        self.last: JobStatus | None = None

    def start(self, on_status: OnStatus) -> None:
        self._on_status = on_status
        # the Events first (kept for KubeRunner.events; they change no status), then the job and
        # its pods; a copy of the keys: a watch that answers at once may add the Workloads' key
        events = (self._keys[0][0], self.ref.place, EVENT)
        self._unsubscribe.append(self.registry.get(events, self._watch_factory(events)).subscribe(self.ref.name, _keep))
        keys = list(self._keys)
        self._keys.append(events)
        for key, target in zip(keys[:2], ("_objects", "_pods"), strict=True):
            self._subscribe(key, target)

    def _subscribe(self, key: tuple[str, str, ResourceKind], target: str) -> None:
        watch = self.registry.get(key, self._watch_factory(key))
        self._unsubscribe.append(watch.subscribe(self.ref.name, self._receiver(target)))

    def _follow_workloads(self) -> None:
        """A queued job: also follow Kueue's Workloads of the namespace (one shared watch), for
        Kueue's reason while the job waits. Subscribed outside the lock: it answers at once."""
        with self._lock:
            if self._workloads_key is not None or self._objects is None or not kueue.queued(
                    list(self._objects.live.values())):
                return
            self._workloads_key = (self._keys[0][0], self.ref.place, WORKLOAD)
            self._keys.append(self._workloads_key)
        self._subscribe(self._workloads_key, "_workloads")

    def _watch_factory(self, key: tuple[str, str, ResourceKind]) -> Callable[[], SharedWatch]:
        group_of = event_job if key[2] == EVENT else None  # Events carry no labels of ours
        return lambda: SharedWatch(self.client, key[1], key[2], group_of=group_of)

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
                answered = self._objects is not None and self._pods is not None  # both watches, once
                if answered:
                    status, pods = self._status()
                    self.last = status
            if answered and self._on_status:
                self._on_status(status, replicas_of(pods))
            if target == "_objects":
                self._follow_workloads()
        return receive

    def _status(self) -> tuple[JobStatus, list[Pod]]:
        objs, pods = self._objects, self._pods
        assert objs is not None  # _receiver calls this once both watches answered
        live_pods = as_pods(pods.live.values()) if pods else []
        refused = objs.error or (pods.error if pods else "")
        if refused:  # the watch may not see the job: the wait cannot go on
            return JobStatus(state=JobState.FAILED, reason=reasons.FORBIDDEN, message=refused), live_pods
        if objs.live:
            objects = list(objs.live.values())
            status = self.backend.status(objects, live_pods)
            workloads = self._workloads
            if workloads is not None and not workloads.error:  # unreadable: no verdict, not a failure
                status = kueue.with_kueue_verdict(status, list(workloads.live.values()), objects)
            return status, live_pods
        if objs.deleted:
            final = self.backend.status(list(objs.deleted.values()), live_pods)
            if final.terminal:
                return final, live_pods
            return JobStatus(state=JobState.STOPPED, reason=reasons.DELETED,
                             message=f"{self.kind.kind} {self.ref.name} was deleted before it finished"), live_pods
        # Not in the watch cache: just created and not yet seen, or really gone. Ask.
        current, _ = self.client.list(self.kind, self.ref.place, labels={LABEL_JOB: self.ref.name})
        if current:
            return self.backend.status(current, live_pods), live_pods
        return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND,
                         message=f"{self.kind.kind} {self.ref.name} not found in namespace {self.ref.place}"), live_pods


def _keep(objects: JobObjects) -> None:
    """An Event watch subscriber: the watch keeps the job's Events; nothing to do on a change."""
