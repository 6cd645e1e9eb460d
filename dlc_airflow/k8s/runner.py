"""Submit, find, inspect and stop one backend's jobs in one namespace (all cluster I/O of a job).

Idempotency lives here. A job's objects have deterministic names, so `submit` creates
each object and treats 409 AlreadyExists as "already made": it reads the object back and
adopts it if it carries this task instance's key (and refuses if it belongs to another).
A submission that fails on a permanent error (invalid, forbidden) deletes what it created,
so nothing is left half-submitted; one cut short by a crash is completed by the next try,
which adopts what exists and creates what is missing.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import replace

from dlc_airflow import reasons, specpack
from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.jobinfo import JobInfo, attempt_of
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONDict
from dlc_airflow.k8s.api import Manifest, Pod, as_events, as_pods
from dlc_airflow.k8s.backends import kueue
from dlc_airflow.k8s.backends.base import KUEUE_QUEUE_LABEL, STOPPED_ANNOTATION, Backend, stop_annotations
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import AdmissionDenied, AuthError, Conflict, KubeConfigError, KubeError, NotFound
from dlc_airflow.k8s.events import event_of, is_job_event
from dlc_airflow.k8s.kinds import EVENT, POD, SECRET, WORKLOAD, ResourceKind, kind_of, kinds_detail, ref_kinds
from dlc_airflow.k8s.pods import CONTAINER, MESSAGE, POD_NAME, STARTED_PHASES, replicas_of, stamped_line
from dlc_airflow.k8s.queues import PENDING
from dlc_airflow.k8s.waiter import JobWaiter
from dlc_airflow.k8s.watch import REGISTRY, JobObjects
from dlc_airflow.naming import (
    LABEL_ATTEMPT,
    LABEL_DAG,
    LABEL_JOB,
    LABEL_RUN,
    LABEL_TASK,
    LABEL_TASK_KEY,
    LABEL_TRY,
    MANAGED_BY,
    MANAGER,
    PREFIX,
    TaskIdentity,
    label_value,
    task_labels,
)
from dlc_airflow.runner import Event, Log, LogLine, LogPositions, Outputs, Reach, Replica, merge_outputs, replica_order
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.specpack import SPEC_ANNOTATION
from dlc_airflow.status import JobStatus, parse_time

log = logging.getLogger(__name__)



# Which task try owns the job now: the try that created it (label dlc-airflow/try) or a
# later one that adopted it (this annotation on the primary object).
CLAIMED_TRY = PREFIX + "claimed-try"
# API statuses after which submitting again cannot help.
PERMANENT_STATUSES = (400, 401, 403, 404, 422)
# Reads of a guarded stop before it stops unguarded (each refused one means the job changed).
GUARDED_STOP_TRIES = 5


class KubeRunner:
    """The JobRunner of the Kubernetes backends (see dlc_airflow.runner)."""

    def __init__(self, client: KubeClient, backend: Backend, namespace: str | None = None,
                 cluster_key: str | None = None):
        self.client = client
        self.backend = backend
        self.backend_name = backend.name
        self.namespace = self.place = namespace or client.namespace
        # waits on the same cluster (and credentials) share one watch per namespace and kind
        self.cluster_key = cluster_key or client.server
        self._queues: dict[str, str] = {}  # job name -> its Kueue LocalQueue ('' for none)

    def follow(self, ref: JobRef) -> JobWaiter:
        """Reports the job's status changes through the process's shared watches."""
        return JobWaiter(self.client, self.backend, ref, self._kind(ref), self.cluster_key)

    # -- submit / find -----------------------------------------------------------------
    def ref(self, job: DLCJob, name: str, attempt: int = 1) -> JobRef:
        return JobRef(backend=self.backend.name, place=self.namespace, name=name, attempt=attempt,
                      detail=kinds_detail(self.backend.kinds(job)))

    def _kinds(self, ref: JobRef) -> tuple[ResourceKind, ...]:
        """Every kind the job is made of, the watched one first (from the ref; for a ref that
        does not say, the kind this backend's job of that name has)."""
        kinds = ref_kinds(ref)
        if kinds:
            return kinds
        found = self.lookup(ref.name)
        return ref_kinds(found) if found is not None and ref_kinds(found) else self.backend.primary_kinds()[:1]

    def _kind(self, ref: JobRef) -> ResourceKind:
        return self._kinds(ref)[0]

    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        """Create the job's objects, or complete and adopt them; returns (ref, created anything)."""
        from dlc_airflow.k8s.backends.jobsecret import fill_job_secret
        from dlc_airflow.k8s.backends.sshkeys import fill_ssh_keys

        objects = self.backend.render(job, name, identity, attempt)
        # the job's own Secrets get their values now: a missing variable fails before any create
        objects, _ = fill_job_secret(objects, job, name)
        objects = fill_ssh_keys(objects, name)
        objects[0]["metadata"].setdefault("annotations", {})[SPEC_ANNOTATION] = specpack.pack(job)
        ref = self.ref(job, name, attempt)
        created: list[Manifest] = []
        owner: Manifest | None = None
        fresh_primary = False
        try:
            for index, obj in enumerate(objects):
                if owner is not None:
                    obj = _owned_by(obj, owner)
                result, made = self._create_or_adopt(obj, identity, fresh_owner=index > 0 and fresh_primary)
                if made:
                    created.append(_without_values(result))
                if index == 0:
                    owner, fresh_primary = result, made
        except (AuthError, KubeConfigError):
            self._roll_back(created)
            raise  # their message names the identity, verb and resource already
        except KubeError as exc:
            self._roll_back(created)
            what = f"{obj['kind']} {obj['metadata']['name']}"
            # a ResourceQuota's refusal frees as other jobs end: worth a later try
            quota = isinstance(exc, AdmissionDenied) and "exceeded quota" in (exc.message or "")
            raise SubmitError(f"submitting job {name} to namespace {self.namespace} failed at {what}: "
                              f"{exc.message or exc.reason} ({exc.status or 'no response'})",
                              permanent=exc.status in PERMANENT_STATUSES and not quota,
                              reason=reasons.QUOTA_EXCEEDED if quota else "") from exc
        except OwnershipError:
            self._roll_back(created)
            raise
        uid = (owner or {}).get("metadata", {}).get("uid", "")
        return replace(ref, uid=uid), bool(created)

    def _create_or_adopt(self, obj: Manifest, identity: TaskIdentity | None,
                         fresh_owner: bool = False) -> tuple[Manifest, bool]:
        kind = kind_of(obj)
        name = obj["metadata"]["name"]
        try:
            return self.client.create(obj, self.namespace), True
        except Conflict:
            if kind == SECRET:
                return self._adopt_secret(obj, fresh_owner)
            existing = self.client.get(kind, name, self.namespace)
            if existing is None:  # deleted in between: create again
                return self.client.create(obj, self.namespace), True
            theirs = existing["metadata"].get("labels", {}).get(LABEL_TASK_KEY)
            ours = obj["metadata"].get("labels", {}).get(LABEL_TASK_KEY)
            if theirs != ours:
                raise OwnershipError(
                    f"{kind.kind} {name} already exists in namespace {self.namespace} and belongs to "
                    f"another task (task-key {theirs}, ours {ours}); rename the job or delete that object"
                ) from None
            log.info("adopting existing %s %s", kind.kind, name)
            return existing, False

    def _adopt_secret(self, obj: Manifest, fresh_owner: bool) -> tuple[Manifest, bool]:
        """The job's own Secret exists. It is not read back: the Role may not get Secrets (see
        k8s/rbac/role.yaml). Its name derives from the primary's, whose task key was checked:
        under an adopted primary it is the one that primary's pods run with, kept as it is;
        under a primary made just now (the rollback deletes ours) it is someone else's."""
        name = obj["metadata"]["name"]
        if fresh_owner:
            raise OwnershipError(
                f"Secret {name} already exists in namespace {self.namespace} and is not this job's (the job's own "
                "Secret is made with it): delete that Secret or rename the job"
            )
        log.info("adopting existing Secret %s (not read back)", name)
        return _without_values(obj), False

    def _roll_back(self, created: list[Manifest]) -> None:
        for obj in reversed(created):
            try:
                self.client.delete(kind_of(obj), obj["metadata"]["name"], self.namespace)
            except KubeError as exc:  # the next try adopts or cleans what is left
                log.warning("could not roll back %s %s: %s", obj["kind"], obj["metadata"]["name"], exc)

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        """Every job this task instance made, oldest attempt first."""
        kinds = self.backend.kinds(job)
        items, _ = self.client.list(kinds[0], self.namespace, labels=task_labels(identity))
        return self._refs(items, kinds)

    def lookup(self, name: str) -> JobRef | None:
        """The job called `name`, of whichever kind this backend makes."""
        for kind in self.backend.primary_kinds():
            items, _ = self.client.list(kind, self.namespace, labels={LABEL_JOB: name})
            refs = self._refs(items, [kind])
            if refs:
                primary = next(o for o in items if not o["metadata"].get("ownerReferences"))
                return replace(refs[-1], detail=kinds_detail(self._kinds_of(primary, kind)))
        return None

    def _refs(self, items: list[Manifest], kinds: list[ResourceKind]) -> list[JobRef]:
        jobs: dict[str, tuple[int, str]] = {}
        for obj in items:
            meta = obj["metadata"]
            labels = meta.get("labels", {})
            if made_by_another_kind(obj):  # a JobSet's, Trainer's or KubeRay's Job: not a native job
                continue
            # native jobs have one Job per role: the primary is the one the others are owned by
            if labels.get(LABEL_JOB) and (labels[LABEL_JOB] not in jobs or not meta.get("ownerReferences")):
                jobs[labels[LABEL_JOB]] = (int(labels.get(LABEL_ATTEMPT, "1")), meta.get("uid", ""))
        return [JobRef(backend=self.backend.name, place=self.namespace, name=n, attempt=a, uid=uid,
                       detail=kinds_detail(kinds))
                for n, (a, uid) in sorted(jobs.items(), key=lambda x: x[1][0])]

    # -- ownership ---------------------------------------------------------------------
    def claim(self, ref: JobRef, try_number: int) -> None:
        patch = {"metadata": {"annotations": {CLAIMED_TRY: str(try_number)}}}
        for obj in self.objects(ref):  # every role Job of a native job: any may be read first
            self.client.patch(self._kind(ref), obj["metadata"]["name"], patch, ref.place)

    def owner_try(self, ref: JobRef) -> int | None:
        return _owner_of(self.objects(ref))

    # -- the GuardedStop capability ------------------------------------------------------
    def stop_unless_claimed(self, ref: JobRef, try_number: int) -> tuple[bool, int | None]:
        """stop(), unless a try newer than `try_number` claimed the job. Each stop patch carries
        the resourceVersion the claim check read, so a claim that lands in between makes the
        API server refuse it (409) and the check runs again on what is there now."""
        for _ in range(GUARDED_STOP_TRIES):
            objects = self._live_objects(ref)
            owner = _owner_of(objects)
            if owner is not None and owner > try_number:
                return False, owner
            try:
                self._stop(ref, objects, guarded=True)
                return True, owner
            except Conflict:  # changed since read (its status, or a claim): read again
                continue
        # the job changed on every read (a busy controller): stop it; a newer try that claimed
        # it meanwhile finds it stopped and submits the next attempt (dlc_airflow.submission)
        self.stop(ref)
        return True, None

    # -- for people: the job CLI and the report page -------------------------------------
    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        selector = {MANAGED_BY: MANAGER}
        for label, value in ((LABEL_DAG, dag_id), (LABEL_TASK, task_id), (LABEL_RUN, run_id)):
            if value is not None:
                selector[label] = label_value(value)
        found: list[JobInfo] = []
        for kind in self.backend.primary_kinds():
            try:
                items, _ = self.client.list(kind, self.namespace, labels=selector)
            except NotFound:  # the kind's CRD is not installed: no such jobs here
                continue
            for obj in items:
                meta = obj["metadata"]
                labels = meta.get("labels", {})
                if not labels.get(LABEL_JOB) or meta.get("ownerReferences"):  # a native job's roles, a JobSet's Jobs
                    continue
                ref = JobRef(backend=self.backend.name, place=self.namespace, name=labels[LABEL_JOB],
                             attempt=attempt_of(labels), uid=meta.get("uid", ""),
                             detail=kinds_detail(self._kinds_of(obj, kind)))
                info = JobInfo.of(ref, labels, meta.get("annotations"), parse_time(meta.get("creationTimestamp")))
                if info.matches(dag_id, task_id, run_id):
                    found.append(info)
        return sorted(found, key=lambda i: (i.created is None, i.created or 0, i.ref.name))

    def _kinds_of(self, primary: Manifest, kind: ResourceKind) -> list[ResourceKind]:
        """Every kind the job made, from its spec (the CLI stops or deletes all of them)."""
        packed = primary["metadata"].get("annotations", {}).get(SPEC_ANNOTATION)
        if packed:
            try:
                return self.backend.kinds(DLCJob.model_validate(specpack.unpack(packed)))
            except (ValueError, TypeError):  # an older or damaged spec: the primary kind is known
                pass
        return [kind]

    # -- the SpecKeeper capability --------------------------------------------------------
    def spec(self, ref: JobRef) -> JSONDict | None:
        for obj in self.objects(ref):
            if not obj["metadata"].get("ownerReferences"):
                packed = obj["metadata"].get("annotations", {}).get(SPEC_ANNOTATION)
                return specpack.unpack(packed) if packed else None
        return None

    def replicas(self, ref: JobRef) -> list[Replica]:
        return replicas_of(self.pods(ref))

    # -- masking (the SecretReader capability) -------------------------------------------
    def secret_values(self, refs: Sequence[SecretKeyRef], logger: Log) -> list[str]:
        """Values of Kubernetes Secret sources this identity may read (to mask them). Nothing is
        read it may not get (dlc-airflow's Role has no `get` on Secrets): those are named once."""
        values: list[str] = []
        unreadable: list[str] = []
        for ref in dict.fromkeys(refs):
            try:
                if not self.client.may("get", SECRET, self.namespace, name=ref.secret):
                    unreadable.append(ref.describe())
                    continue
                obj = self.client.get(SECRET, ref.secret, self.namespace) or {}
                raw = (obj.get("data") or {}).get(ref.key)
                if raw:
                    values.append(base64.b64decode(raw).decode("utf-8", errors="replace"))
            except Exception as exc:  # noqa: BLE001 - masking is best effort; the kubelet reports a missing Secret
                logger.debug("could not read %s to mask it: %s", ref.describe(), exc)
                unreadable.append(ref.describe())
        if unreadable:
            logger.info("not masked in this log: %s (this identity may not get them; grant get on those Secrets "
                        "by resourceNames to have them masked)", ", ".join(unreadable))
        return values

    # -- inspect -----------------------------------------------------------------------
    def objects(self, ref: JobRef) -> list[Manifest]:
        """The job's objects of the watched kind (a native job: one Job per role)."""
        return self.client.list(self._kind(ref), ref.place, labels={LABEL_JOB: ref.name})[0]

    def pods(self, ref: JobRef) -> list[Pod]:
        return as_pods(self.client.list(POD, ref.place, labels={LABEL_JOB: ref.name})[0])

    def status(self, ref: JobRef) -> JobStatus:
        objects = self.objects(ref)
        status = self.backend.status(objects, self.pods(ref))
        if kueue.queued(objects):
            status = kueue.with_kueue_verdict(status, self.workloads(ref), objects)
        return status

    def workloads(self, ref: JobRef) -> list[Manifest]:
        """Kueue's Workloads of a queued job (none where they cannot be read: the status then
        says only that the job waits)."""
        try:
            return self.client.list(WORKLOAD, ref.place, labels={LABEL_JOB: ref.name})[0]
        except KubeError:
            return []

    # -- the QueueSource capability ----------------------------------------------------
    def queue_position(self, ref: JobRef) -> str:
        """Where the queued job stands in its Kueue LocalQueue and ClusterQueue, and what waits
        ahead of it (the process's shared reader of the queue: dlc_airflow.k8s.queues)."""
        if ref.name not in self._queues:  # the job's queue, read once its objects are there
            objects = self.objects(ref)
            if not objects:
                return ""
            labels = [(o.get("metadata") or {}).get("labels") or {} for o in objects]
            self._queues[ref.name] = next((ls[KUEUE_QUEUE_LABEL] for ls in labels if KUEUE_QUEUE_LABEL in ls), "")
        queue = self._queues[ref.name]
        if not queue or not ref.uid:
            return ""
        pending, workloads = PENDING.read(self.client, self.cluster_key, ref.place, queue)
        position = kueue.queue_position(pending, ref.uid, workloads)
        return position.describe() if position is not None else ""

    # -- the EventSource capability ----------------------------------------------------
    def events(self, ref: JobRef, seen: Collection[str] = ()) -> list[Event]:
        """Kubernetes Events about the job's objects and pods (not yet in `seen`): from the
        namespace's shared Event watch while this process waits on the job, else one list."""
        cached = self._cached(EVENT, ref)
        items = as_events(cached.live.values() if cached is not None else self.client.list(EVENT, ref.place)[0])
        return [event_of(e) for e in items if is_job_event(e, ref.name) and e["metadata"]["uid"] not in seen]

    def _cached(self, kind: ResourceKind, ref: JobRef) -> JobObjects | None:
        """What this process's shared watch of `kind` holds of the job, when it waits on it."""
        watch = REGISTRY.peek((self.cluster_key, ref.place, kind))
        return watch.cached(ref.name) if watch is not None else None

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        """New log lines of every started pod, and the new positions.

        Positions are per pod: the timestamp of the last line read (sinceTime is
        inclusive, so that line is skipped when read again).
        """
        positions = dict(since or {})
        lines: list[LogLine] = []
        chosen = replicas if replicas is not None else self.replicas(ref)
        for replica in sorted(chosen, key=lambda r: r.name):
            pod_name = replica.detail.get(POD_NAME, "")
            if replica.state not in STARTED_PHASES or not pod_name:
                continue
            last = positions.get(pod_name)
            try:
                text = self.client.read_log(pod_name, ref.place, container=replica.detail.get(CONTAINER) or None,
                                            since_time=str(last) if last else None, timestamps=True)
            except KubeError as exc:
                log.debug("no logs for %s yet: %s", pod_name, exc)
                continue
            for raw in text.splitlines():
                stamped = stamped_line(raw)
                if stamped is None:
                    log.debug("logs of %s: %s", pod_name, raw)
                    continue
                stamp, line = stamped
                if last and stamp <= str(last):
                    continue
                lines.append(LogLine(replica.name, line))
                positions[pod_name] = stamp
        return lines, positions

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        """What the job reported through dlc_airflow.runtime: the containers' termination
        messages; the coordinator replica wins."""
        reports = []
        chosen = replicas if replicas is not None else self.replicas(ref)
        for replica in sorted(chosen, key=replica_order, reverse=True):  # the coordinator last
            try:
                data = json.loads(replica.detail.get(MESSAGE) or "null")
            except ValueError:
                continue
            if isinstance(data, dict):
                reports.append(data)
        return merge_outputs(reports)

    # -- the Settler capability, stop, delete -----------------------------------------------
    def settle(self, ref: JobRef) -> list[str]:
        """Once the job has finished: stop the parts still running (a native job's
        parameter servers, or its other roles after one role failed); every object stays -
        but for a job its Kueue preemption failed (restart_on_preemption off), which is deleted:
        Kueue would run it again."""
        kind = self._kind(ref)
        cached = self._cached(kind, ref)  # the wait's own view: no request for most jobs
        objects = list(cached.live.values()) if cached is not None and cached.live else self.objects(ref)
        if kueue.queued(objects) and kueue.fails_on_preemption(objects) and kueue.evicted(self.workloads(ref)):
            # failed by its preemption (restart_on_preemption off): Kueue would run it again
            self.delete(ref)
            return [ref.name]
        names = self.backend.leftovers(objects)
        for name in names:
            self.client.patch(kind, name, self.backend.settle_patch(), ref.place)
        return names

    def stop(self, ref: JobRef) -> int:
        """End the job and keep its objects: each object of the watched kind gets the backend's
        stop patch (a native Job a past deadline, a CRD `suspend`) and STOPPED_ANNOTATION, which
        makes its status STOPPED. A queued job's Workloads are deactivated too, or Kueue would
        resume it; where that is refused (the Role may not patch Workloads), the job is deleted
        instead, and the log says so. Returns how many objects it stopped."""
        return self._stop(ref, self._live_objects(ref))

    def _live_objects(self, ref: JobRef) -> list[Manifest]:
        return [o for o in self.objects(ref) if not (o.get("metadata") or {}).get("deletionTimestamp")]

    def _stop(self, ref: JobRef, objects: list[Manifest], guarded: bool = False) -> int:
        """stop() on the objects as read; `guarded`: each patch only if the object is unchanged
        since (Conflict otherwise). The delete of a queued job whose Workloads cannot be
        deactivated is not guarded. A stop that reached some objects only (a guarded patch
        refused halfway) is finished whatever the status says: the objects it stopped can make
        the whole job read ended (a native Job past its deadline fails) while the rest still run."""
        unstopped = [o for o in objects if STOPPED_ANNOTATION not in (o["metadata"].get("annotations") or {})]
        begun = len(unstopped) < len(objects)
        if not unstopped or (not begun and self.backend.status(objects).terminal):
            return 0
        if kueue.queued(objects) and not self._deactivate(ref):
            self.delete(ref)
            return len(objects)
        patch = _merged(self.backend.stop_patch(), stop_annotations())
        stopped = 0
        for obj in unstopped:
            version = obj["metadata"].get("resourceVersion")
            body = _merged(patch, {"metadata": {"resourceVersion": version}}) if guarded and version else patch
            try:
                self.client.patch(self._kind(ref), obj["metadata"]["name"], body, ref.place)
                stopped += 1
            except NotFound:  # gone in between: nothing of it runs
                continue
        return stopped

    def _deactivate(self, ref: JobRef) -> bool:
        """Deactivate the job's Kueue Workloads (Kueue then keeps it suspended); False when they
        cannot be read or patched."""
        try:
            for workload in self.client.list(WORKLOAD, ref.place, labels={LABEL_JOB: ref.name})[0]:
                self.client.patch(WORKLOAD, workload["metadata"]["name"], {"spec": {"active": False}}, ref.place)
        except KubeError as exc:
            log.warning("job %s: could not deactivate its Kueue Workloads (%s): deleting the job instead, or "
                        "Kueue would run it again (grant patch on workloads.kueue.x-k8s.io to keep stopped jobs)",
                        ref.name, exc)
            return False
        return True

    def delete(self, ref: JobRef) -> None:
        """Delete every object of the job (pods go with their owners)."""
        # the primary (which owns the rest) last: the garbage collector does not race us
        for kind in reversed(self._kinds(ref)):
            items, _ = self.client.list(kind, ref.place, labels={LABEL_JOB: ref.name})
            for obj in items:
                self.client.delete(kind, obj["metadata"]["name"], ref.place)


def make_runner(backend: str, reach: Reach) -> KubeRunner:
    """The registry's runner factory of the Kubernetes backends: the cluster the connection
    names (its namespace, unless the task names one)."""
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.connection import KubeConnection

    kube = KubeConnection(reach.conn_id, namespace=reach.place,
                          extras=dict(reach.extras) if reach.extras is not None else None)
    client = kube.get_client()
    return KubeRunner(client, get_backend(backend), client.namespace, cluster_key=kube.cluster_key())


def _merged(*patches: Manifest) -> Manifest:
    """One merge patch of several (nested mappings merged)."""
    out: Manifest = {}
    for patch in patches:
        for key, value in patch.items():
            out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _owner_of(objects: list[Manifest]) -> int | None:
    """The newest try that made or claimed the job, from its objects (None: no try says)."""
    tries = []
    for obj in objects:
        meta = obj["metadata"]
        for value in (meta.get("labels", {}).get(LABEL_TRY), meta.get("annotations", {}).get(CLAIMED_TRY)):
            if value and value.isdigit():
                tries.append(int(value))
    return max(tries) if tries else None


def _without_values(obj: Manifest) -> Manifest:
    """A Secret without its values (what is kept of it in memory); other objects as they are."""
    if obj.get("kind") != "Secret":
        return obj
    return {k: v for k, v in obj.items() if k not in ("data", "stringData")}


def _owned_by(obj: Manifest, owner: Manifest) -> Manifest:
    """A copy of obj owned by the job's primary object: deleting it removes the rest."""
    obj = json.loads(json.dumps(obj))
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
    }]
    return obj


def made_by_another_kind(obj: Manifest) -> bool:
    """An object a controller of another kind made with our labels (a JobSet's batch Jobs):
    a native job's role Jobs are owned by its primary Job, of their own kind."""
    return any(owner.get("kind") != obj.get("kind") for owner in obj["metadata"].get("ownerReferences") or [])
