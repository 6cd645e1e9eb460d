"""DLCJobTrigger: wait on a job in the triggerer.

Every trigger of a triggerer process that waits on jobs in the same namespace of the same
cluster shares one watch of the job kind and one of pods (dlc_airflow.k8s.watch): waiting
costs the API server O(1) watches per namespace, whatever the number of jobs, and a
finished job is seen as soon as its status reaches the watch. The trigger logs every state
change (with the job's new pod log lines and Events) and, when the job is done, ends the
task itself (TaskSuccessEvent / TaskFailedEvent, after writing the task's XComs as a worker
would) so a finished job does not wait for a worker slot. A task that needs no worker at all starts here
(start_from_trigger): the trigger submits or adopts its job first (dlc_airflow.airflow.start).

Waiting costs the API server nothing per job: status, pods and Events come from the shared
watches; pod logs are read at the job's state changes and at its end. A job whose logs are files
of this host (local, Slurm) has them read every FOLDER_LOG_EVERY seconds too, which is what
keeps its progress and ETA lines coming (a Kubeflow Trainer job's come with its status). The few blocking calls
(logs, the wrap-up) run on a thread pool of dlc-airflow's own, so they never queue behind other
triggers' work on asyncio's default pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from dlc_airflow.airflow.event import XCOMS, JobEvent
from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.airflow.notify import Notifications
from dlc_airflow.finish import OnFinish, finish
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.progress import Progress
from dlc_airflow.registry import has_connection, has_file_logs
from dlc_airflow.runner import Connection, JobRunner, Replica
from dlc_airflow.status import JobStatus

T = TypeVar("T")
# dlc-airflow's own threads for the triggers' blocking calls (a finished job's logs and wrap-up,
# a start's submit): a burst of finishing jobs is not queued behind other triggers' work on
# asyncio's default pool (a few threads on a small machine), nor they behind it.
_POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dlc-trigger")
FOLDER_LOG_EVERY = 5.0  # seconds between reads of a job's log files while it runs (a file read each)
# A task a worker deferred, which goes back to a worker at the end, is not handed back sooner than
# this after its trigger began: Airflow 3.1-3.3's scheduler fails a resumed try that is already
# running when it drains the stale "success" of the worker that deferred (apache/airflow#72716).
RESUME_NOT_BEFORE = 15.0


async def blocking(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`func` on _POOL, in a copy of this task's context (as asyncio.to_thread): the trigger's log
    context (its lines go to the task's log) and Airflow's channel to the supervisor go along."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)


class DLCJobTrigger(BaseTrigger):
    def __init__(self, *, ref: JSONObject | None = None, conn_id: str = DEFAULT_CONN_ID, namespace: str | None = None,
                 local_root: str | None = None, deadline: float | None = None,
                 queue_timeout: float | None = None, queued_since: float | None = None,
                 stream_logs: bool = True, on_finish: str = OnFinish.KEEP.value, end_from_trigger: bool = True,
                 try_number: int | None = None, secrets: JSONObject | None = None, notify: JSONObject | None = None,
                 start: JSONObject | None = None, timeout: float | None = None, fail_on_worker: bool = False):
        super().__init__()
        self.ref = ref
        self.conn_id = conn_id
        self.namespace = namespace
        self.local_root = local_root
        self.deadline = deadline
        self.queue_timeout = queue_timeout
        self.queued_since = queued_since
        self.stream_logs = stream_logs
        self.on_finish = OnFinish.parse(on_finish, "DLCJobTrigger").value
        self.end_from_trigger = end_from_trigger
        # of the operator task that deferred; None for a sensor, which only watches the job
        # (it never stops, settles or deletes it)
        self.try_number = try_number
        # what to mask in this process (dlc_airflow.secrets.TriggerSecrets): references to
        # Airflow sources, read again here, never their values
        self.secrets = secrets
        # the notifiers told of the job's state changes (dlc_airflow.airflow.notify.Notifications)
        self.notify = notify
        # start_from_trigger: no job yet (ref None); the spec and how to submit it
        # (dlc_airflow.airflow.start), and the task's timeout, which counts from the submit
        self.start = start
        self.timeout = timeout
        # the task has a retry policy: a failure goes back to a worker, where Airflow evaluates
        # it (a TaskFailedEvent would bypass it: the triggerer only counts retries)
        self.fail_on_worker = fail_on_worker
        self._xcoms: JSONObject = {}  # what a task started here still has to publish (dag.test: at its end)

    def serialize(self) -> tuple[str, JSONObject]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "ref": self.ref, "conn_id": self.conn_id, "namespace": self.namespace,
            "local_root": self.local_root, "deadline": self.deadline, "queue_timeout": self.queue_timeout,
            "queued_since": self.queued_since, "stream_logs": self.stream_logs, "on_finish": self.on_finish,
            "end_from_trigger": self.end_from_trigger, "try_number": self.try_number, "secrets": self.secrets,
            "notify": self.notify, "start": self.start, "timeout": self.timeout,
            "fail_on_worker": self.fail_on_worker,
        })

    async def _runner(self) -> JobRunner:
        from dlc_airflow.airflow.runners import shared_runner

        assert self.ref is not None  # (a task started here has made its job by now)
        ref = JobRef.from_dict(self.ref)
        uses_connection = has_connection(ref.backend)
        connection = await _connection(self.conn_id) if uses_connection else None
        extras = connection.extra_dejson if connection is not None else ({} if uses_connection else None)
        namespace = self.namespace or ref.place
        return await blocking(shared_runner, ref.backend, self.conn_id, namespace,
                              extras=extras, local_root=self.local_root, connection=connection)

    async def _begin(self) -> tuple[JobRef, JobRunner]:
        """The job to wait on, and its runner: this task's job (deferred by a worker), or, for a
        task started here, the job it submits or adopts now (StartError when it cannot)."""
        if self.ref is not None:
            runner = await self._runner()
            await self._mask_secrets(runner)
            return JobRef.from_dict(self.ref), runner
        from dlc_airflow.airflow.start import start_job

        assert self.start is not None
        started = await blocking(start_job, self.start, self.task_instance, self.namespace, self.local_root, self.log)
        # from now on, as if a worker had deferred it (on_kill, the wait, the wrap-up)
        self.ref, self.conn_id, self.try_number = started.ref.to_dict(), started.conn_id, started.identity.try_number
        self.secrets, self.queued_since = started.secrets, started.began
        # published now, not with the result: the job's links show while it runs, and the end
        # (when many jobs finish at once) sends one XCom through the triggerer's channel, not five
        self._xcoms = {} if await self._publish(started.xcoms) else started.xcoms
        self.deadline = started.began + self.timeout if self.timeout else None
        if self.notify:
            self.notify = {**self.notify, "where": started.where}
        return started.ref, started.runner

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dlc_airflow.airflow.start import StartError
        from dlc_airflow.airflow.waiting import Update, WaitIO

        began = time.monotonic()
        try:
            ref, runner = await self._begin()
        except StartError as exc:
            self.log.error("%s", exc)
            # the worker raises it for Airflow: a permanent error fails the task without retries
            yield TriggerEvent({"dlc_start_error": str(exc), "permanent": exc.permanent,
                                "reason": getattr(exc.__cause__, "reason", "") or ""})
            return
        # the wait began at the submit (queued_since), maybe in another triggerer: its clocks
        # (and its messages: "within timeout (30m)") count from there
        elapsed = max(0.0, time.time() - self.queued_since) if self.queued_since else 0.0
        timeout = self.deadline - (self.queued_since or time.time()) if self.deadline else None
        progress = Progress(ref.name, time.monotonic() - elapsed, queue_timeout=self.queue_timeout,
                            timeout=timeout, stream_logs=self.stream_logs,
                            log_every=FOLDER_LOG_EVERY if has_file_logs(ref.backend) else None)
        notifications = Notifications.from_dict(self.notify)
        wait = WaitIO(runner, ref, self.log, progress, notifications.on_change if notifications else None)
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue[Update] = asyncio.Queue()
        follower = runner.follow(ref)

        def on_status(status: JobStatus, replicas: Sequence[Replica]) -> None:  # in the follower's thread
            loop.call_soon_threadsafe(updates.put_nowait, (status, replicas))

        await blocking(follower.start, on_status)
        when = f"every {FOLDER_LOG_EVERY:.0f}s and at each state change" if progress.log_every else "at each state change"
        self.log.info("waiting on job %s in %s (shared watch; logs %s)", ref.name, ref.place, when)
        try:
            while True:
                batch: list[Update] = []
                try:
                    batch.append(await asyncio.wait_for(updates.get(), progress.wakeup(time.monotonic())))
                    while not updates.empty():
                        batch.append(updates.get_nowait())
                except TimeoutError:
                    pass  # a turn without news: heartbeat, timeouts, why a job cannot start
                # the turn's reads (logs, Events) come from the shared watches' caches or are
                # blocking requests: off the loop
                verdict = await blocking(wait.turn, batch, time.monotonic())
                if verdict is None:
                    continue
                # The triggerer cannot reach the task state store (Airflow 3.3): the worker
                # records the job when it defers, and the result when it resumes.
                outcome = await blocking(finish, runner, ref, verdict, wait.replicas, on_finish=OnFinish(self.on_finish),
                                         log=self.log, owner_try=self.try_number)
                if notifications is not None:
                    await blocking(notifications.final, outcome.ok, verdict.status, outcome.error)
                yield await self._event(JobEvent(ref, outcome.ok, outcome.result, outcome.error), began)
                return
        finally:
            await blocking(follower.close)

    async def _mask_secrets(self, runner: JobRunner) -> None:
        """The job's secret values, registered with the secrets masker of the triggerer (another
        process than the task's) before any of the job's logs are copied here."""
        from dlc_airflow.secrets.mask import TriggerSecrets

        if self.secrets:
            await blocking(TriggerSecrets.from_dict(self.secrets).register, runner, self.log)

    async def _event(self, event: JobEvent, began: float) -> TriggerEvent:
        if self.end_from_trigger and (event.ok or not self.fail_on_worker):
            await self._publish({**self._xcoms, "return_value": event.result})
            return TaskSuccessEvent() if event.ok else TaskFailedEvent()
        if self.start is None and self.task_instance is not None:  # a worker deferred it (not dag.test)
            await asyncio.sleep(max(0.0, began + RESUME_NOT_BEFORE - time.monotonic()))
        # a task started here publishes its XComs from the worker that takes the event
        return TriggerEvent({**event.to_dict(), XCOMS: self._xcoms} if self._xcoms else event.to_dict())

    async def _publish(self, xcoms: JSONObject) -> bool:
        """Write the XComs of a task this trigger ends as its worker would: through the Task SDK's
        channel (SetXCom, serialized by the XCom backend). Airflow 3.1-3.3 store the `xcoms` of a
        TaskSuccessEvent encoded twice (json.dumps into a JSON column), so a downstream task's
        xcom_pull would get a str instead of the result. False when there is no channel (dag.test)."""
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import SetXCom
        from airflow.sdk.execution_time.xcom import XCom

        ti = self.task_instance
        if ti is None:  # dag.test: the task resumes in process with the end event and publishes them
            return False
        for key, value in xcoms.items():
            where = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}
            message = SetXCom(key=key, value=XCom.serialize_value(value, key=key, **where), **where)
            await task_runner.SUPERVISOR_COMMS.asend(message)  # the triggerer's channel, from its event loop
        return True

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop its job (not on triggerer restarts), unless
        a newer try of the task has adopted it."""
        from dlc_airflow.submission import stop_if_owner

        if self.ref is None:  # started here, killed before its job was made
            self.log.info("task killed before its job was submitted")
            return
        ref = JobRef.from_dict(self.ref)
        if self.try_number is None:  # a sensor's wait: the job is not this task's to stop
            self.log.info("task killed while deferred; job %s is not its own and keeps running", ref.name)
            return
        runner = await self._runner()
        self.log.info("task killed while deferred")
        await blocking(stop_if_owner, runner, ref, self.try_number, self.log)


async def _connection(conn_id: str) -> Connection | None:
    """The Airflow connection, read without blocking the triggerer's loop (None if none)."""
    from airflow.sdk.bases.hook import BaseHook

    try:
        return await BaseHook.aget_connection(conn_id)
    except Exception:  # noqa: BLE001 - kubernetes_default may not exist: default config
        return None
