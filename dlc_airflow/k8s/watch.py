"""One list+watch per (cluster, namespace, kind), shared by every job waiting in a process.

A waiter registers interest in one job (the value of the label dlc-airflow/job-name) and is
called with that job's current objects whenever they change, and once at once with the
state the watch already knows. The watch lists, then watches from the list's
resourceVersion; it resumes from the last resourceVersion it saw after a broken
connection (with backoff), and lists again after 410 Gone, delivering whatever changed
in between, deletions included. Objects are level-triggered state (a Job's conditions
stay on the object), so a waiter never misses a terminal transition: it sees the current
state when it registers, and every change after.

The watch runs in a daemon thread and stops when its last waiter leaves; callbacks run in
that thread (the trigger hands them to its event loop with call_soon_threadsafe).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import AuthError, Gone, KubeError
from dlc_airflow.k8s.kinds import ResourceKind
from dlc_airflow.naming import LABEL_JOB, MANAGED_BY, MANAGER

log = logging.getLogger(__name__)

# (cluster, namespace, kind): one shared watch each in a process
WatchKey = tuple[str, str, ResourceKind]
# objects of one job, by object name; `deleted` holds the last state of objects that went away
Callback = Callable[["JobObjects"], None]


@dataclass
class JobObjects:
    live: dict[str, Manifest] = field(default_factory=dict)
    deleted: dict[str, Manifest] = field(default_factory=dict)
    synced: bool = False  # the watch has listed at least once
    error: str = ""  # the watch is refused (401/403 the client confirmed): why

    def copy(self) -> JobObjects:
        return JobObjects(dict(self.live), dict(self.deleted), self.synced, self.error)


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0  # watch requests opened (reconnects included)
    events: int = 0
    gone: int = 0
    errors: int = 0


class SharedWatch:
    """list+watch of one kind in one namespace, for objects dlc-airflow manages.

    Objects are kept per job: by their job-name label, or, for kinds that carry no labels of
    ours (Events), by `group_of(object, jobs)` among the jobs someone waits on - then the
    watch sees every object of the kind in the namespace but keeps only those of waited jobs.
    """

    def __init__(self, client: KubeClient, namespace: str, kind: ResourceKind, *,
                 group_label: str = LABEL_JOB, watch_timeout: int = 240,
                 group_of: Callable[[Manifest, Container[str]], str | None] | None = None):
        self.client, self.namespace, self.kind = client, namespace, kind
        self.group_label = group_label
        self.group_of = group_of
        self.selector: dict[str, str] | None = None if group_of else {MANAGED_BY: MANAGER}
        self.watch_timeout = watch_timeout
        self.stats = WatchStats()
        self._lock = threading.Lock()
        self._objects: dict[str, JobObjects] = {}
        self._subscribers: dict[str, list[Callback]] = {}
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    # -- subscribers -------------------------------------------------------------------
    def subscribe(self, job: str, callback: Callback) -> Callable[[], None]:
        """Call `callback(JobObjects)` on every change of `job`'s objects; returns unsubscribe."""
        with self._lock:
            self._subscribers.setdefault(job, []).append(callback)
            current = self._objects.get(job, JobObjects()).copy()
            current.synced = self._synced.is_set()
        if current.synced:
            callback(current)
        self._ensure_running()

        def unsubscribe() -> None:
            with self._lock:
                subs = self._subscribers.get(job, [])
                if callback in subs:
                    subs.remove(callback)
                if not subs:
                    self._subscribers.pop(job, None)
        return unsubscribe

    def waiting(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._subscribers.values())

    def stop(self) -> None:
        self._stop.set()

    # -- the watch loop ----------------------------------------------------------------
    def _ensure_running(self) -> None:
        with self._lock:
            if self._thread and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, daemon=True, name=f"dlc-watch-{self.kind.plural}-{self.namespace}")
            self._thread.start()

    def cached(self, job: str) -> JobObjects | None:
        """What the watch holds of `job` when it is listed and someone waits on the job (its
        objects are then kept up to date), else None: ask the server."""
        with self._lock:
            if not self._synced.is_set() or job not in self._subscribers:
                return None
            return self._objects.get(job, JobObjects(synced=True)).copy()

    def _group(self, obj: Manifest) -> str | None:
        if self.group_of is not None:
            return self.group_of(obj, self._subscribers)
        group = obj.get("metadata", {}).get("labels", {}).get(self.group_label)
        return str(group) if group is not None else None

    def _run(self) -> None:
        selector = self.selector
        rv: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if rv is None:
                    rv = self._relist(selector)
                self.stats.watches += 1
                for etype, obj in self.client.watch(self.kind, self.namespace, resource_version=rv,
                                                    labels=selector, timeout_seconds=self.watch_timeout):
                    failures = 0
                    rv = obj.get("metadata", {}).get("resourceVersion") or rv
                    if etype == "BOOKMARK":
                        continue
                    self.stats.events += 1
                    self._apply(etype, obj)
                    if self._stop.is_set():
                        return
            except AuthError as exc:
                # Confirmed by the client (not the few seconds of 403 after an API server
                # restart): tell every waiter, whose task fails with this message, and try
                # again now and then for new waiters (a RoleBinding may be fixed meanwhile).
                self.stats.errors += 1
                self.last_error = str(exc)
                log.error("watch %s/%s refused: %s", self.namespace, self.kind.plural, exc)
                self._refused(str(exc))
                self._stop.wait(30.0)
                rv = None
            except Gone:
                self.stats.gone += 1
                log.info("watch %s/%s: resourceVersion %s expired (410 Gone); listing again",
                         self.namespace, self.kind.plural, rv)
                rv = None
            except KubeError as exc:
                self.stats.errors += 1
                failures += 1
                self.last_error = str(exc)
                delay = min(5.0, 0.1 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                log.warning("watch %s/%s: %s; resuming from resourceVersion %s in %.1fs",
                            self.namespace, self.kind.plural, exc, rv, delay)
                self._stop.wait(delay)
            except Exception as exc:
                self.stats.errors += 1
                failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("watch %s/%s failed; listing again", self.namespace, self.kind.plural)
                rv = None
                self._stop.wait(min(5.0, 0.2 * failures))

    def _relist(self, selector: dict[str, str] | None) -> str:
        items, rv = self.client.list(self.kind, self.namespace, labels=selector)
        self.stats.lists += 1
        fresh: dict[str, dict[str, Manifest]] = {}
        with self._lock:
            for obj in items:
                job = self._group(obj)
                if job:
                    fresh.setdefault(job, {})[obj["metadata"]["name"]] = obj
        changed: list[str] = []
        with self._lock:
            # subscribed jobs too: a job with no object of this kind yet (no pod could be
            # created) must still hear "none", or its waiter never gets a first status
            for job in set(self._objects) | set(fresh) | set(self._subscribers):
                before = self._objects.get(job, JobObjects())
                live = fresh.get(job, {})
                gone = {n: o for n, o in before.live.items() if n not in live}
                if gone or _versions(before.live) != _versions(live) or not self._synced.is_set():
                    self._objects[job] = JobObjects(live, {**before.deleted, **gone}, True)
                    changed.append(job)
            self._synced.set()
        for job in changed:
            self._notify(job)
        return rv

    def _apply(self, etype: str, obj: Manifest) -> None:
        meta = obj.get("metadata", {})
        with self._lock:
            job = self._group(obj)
            if not job:
                return
            objs = self._objects.setdefault(job, JobObjects(synced=True))
            if etype == "DELETED":
                objs.live.pop(meta["name"], None)
                objs.deleted[meta["name"]] = obj
                if not objs.live and not self._subscribers.get(job):
                    # nobody waits on it: forget it (the cache holds live objects only)
                    del self._objects[job]
                    return
            else:
                objs.live[meta["name"]] = obj
                objs.deleted.pop(meta["name"], None)
        self._notify(job)

    def _refused(self, why: str) -> None:
        with self._lock:
            jobs = list(self._subscribers)
            for job in jobs:
                self._objects.setdefault(job, JobObjects(synced=True)).error = why
        for job in jobs:
            self._notify(job)
        with self._lock:
            for objs in self._objects.values():
                objs.error = ""  # a later list that works clears it

    def _notify(self, job: str) -> None:
        with self._lock:
            subs = list(self._subscribers.get(job, ()))
            snapshot = self._objects.get(job, JobObjects(synced=True)).copy()
        for callback in subs:
            try:
                callback(snapshot)
            except Exception:
                log.exception("watch callback for %s failed", job)


def _versions(objs: dict[str, Manifest]) -> dict[str, str]:
    return {n: o.get("metadata", {}).get("resourceVersion", "") for n, o in objs.items()}


class WatchRegistry:
    """The shared watches of a process: one per (cluster key, namespace, kind).

    A watch with no waiters is stopped after `linger` seconds (so a burst of tasks that
    defer one after another reuses one watch instead of opening many).
    """

    def __init__(self, linger: float = 30.0):
        self.linger = linger
        self._lock = threading.Lock()
        self._watches: dict[WatchKey, SharedWatch] = {}
        self._idle_since: dict[WatchKey, float] = {}

    def get(self, key: WatchKey, factory: Callable[[], SharedWatch]) -> SharedWatch:
        with self._lock:
            self._reap()
            watch = self._watches.get(key)
            if watch is None:
                watch = self._watches[key] = factory()
            self._idle_since.pop(key, None)
            return watch

    def release(self, key: WatchKey) -> None:
        with self._lock:
            watch = self._watches.get(key)
            if watch is not None and watch.waiting() == 0:
                self._idle_since[key] = time.monotonic()
                # reap it after the linger time even if nobody calls get/release again
                timer = threading.Timer(self.linger + 0.1, self._reap_locked)
                timer.daemon = True
                timer.start()
            self._reap()

    def _reap_locked(self) -> None:
        with self._lock:
            self._reap()

    def _reap(self) -> None:
        now = time.monotonic()
        for key, since in list(self._idle_since.items()):
            watch = self._watches.get(key)
            if watch is None or (watch.waiting() == 0 and now - since >= self.linger):
                if watch is not None:
                    watch.stop()
                self._watches.pop(key, None)
                self._idle_since.pop(key, None)

    def watches(self) -> dict[WatchKey, SharedWatch]:
        with self._lock:
            return dict(self._watches)


    def peek(self, key: WatchKey) -> SharedWatch | None:
        """The watch of `key` if this process has one (a reader's cache; nothing is started)."""
        with self._lock:
            return self._watches.get(key)


# A dlc-airflow job's name (naming.job_name: <base>-<10 hex>-<attempt>) at the start of an
# object's name: the job's own objects and its children (pods, role Jobs, a RayCluster...).
_JOB_NAME = re.compile(r"^([a-z][a-z0-9-]*?-[0-9a-f]{10}-[0-9]+)(?:-|$)")


def event_job(event: Manifest, jobs: Container[str]) -> str | None:
    """The job an Event is about: a waited job whose name starts the involved object's name,
    else any dlc-airflow job name there (so Events from before a wait began are at hand)."""
    name = (event.get("involvedObject") or {}).get("name") or ""
    if name in jobs:
        return name
    cut = name.find("-")
    while cut > 0:
        if name[:cut] in jobs:
            return name[:cut]
        cut = name.find("-", cut + 1)
    found = _JOB_NAME.match(name)
    return found.group(1) if found else None


# The process's registry (the triggerer's, or a worker's for in-process waits).
REGISTRY = WatchRegistry()
