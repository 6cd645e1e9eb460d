"""DLCJobTrigger: wait on a job in the triggerer.

Every trigger of a triggerer process that waits on jobs in the same namespace of the same
cluster shares one watch of the job kind and one of pods (dlc_airflow.k8s.watch): waiting
costs the API server O(1) watches per namespace, whatever the number of jobs, and a
finished job is seen as soon as its status reaches the watch. The trigger logs every state
change (with the job's new pod log lines and Events) and, when the job is done, ends the
task itself (TaskSuccessEvent / TaskFailedEvent carrying the XComs) so a finished job does
not wait for a worker slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TaskFailedEvent, TaskSuccessEvent, TriggerEvent

from dlc_airflow.airflow.event import JobEvent
from dlc_airflow.airflow.notify import Notifications
from dlc_airflow.finish import OnFinish, finish
from dlc_airflow.jobref import JobRef
from dlc_airflow.local.jobrunner import LOCAL
from dlc_airflow.progress import Progress
from dlc_airflow.runner import JobRunner
from dlc_airflow.status import JobStatus


class DLCJobTrigger(BaseTrigger):
    def __init__(self, *, ref: dict, conn_id: str = "kubernetes_default", namespace: str | None = None,
                 local_root: str | None = None, deadline: float | None = None,
                 queue_timeout: float | None = None, queued_since: float | None = None,
                 stream_logs: bool = True, on_finish: str = OnFinish.KEEP.value, end_from_trigger: bool = True,
                 try_number: int | None = None, secrets: dict | None = None, notify: dict | None = None):
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

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "ref": self.ref, "conn_id": self.conn_id, "namespace": self.namespace,
            "local_root": self.local_root, "deadline": self.deadline, "queue_timeout": self.queue_timeout,
            "queued_since": self.queued_since, "stream_logs": self.stream_logs, "on_finish": self.on_finish,
            "end_from_trigger": self.end_from_trigger, "try_number": self.try_number, "secrets": self.secrets,
            "notify": self.notify,
        })

    async def _runner(self) -> JobRunner:
        from dlc_airflow.airflow.runners import shared_runner

        ref = JobRef.from_dict(self.ref)
        connection = None if ref.backend == LOCAL else await _connection(self.conn_id)
        extras = connection.extra_dejson if connection is not None else ({} if ref.backend != LOCAL else None)
        namespace = self.namespace or ref.namespace
        return await asyncio.to_thread(shared_runner, ref.backend, self.conn_id, namespace,
                                       extras=extras, local_root=self.local_root, connection=connection)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from dlc_airflow.airflow.waiting import START_CHECK_EVERY, LogCursor, why_not_started

        ref = JobRef.from_dict(self.ref)
        runner = await self._runner()
        await self._mask_secrets(runner)
        # the wait began at the submit (queued_since), maybe in another triggerer: its clocks
        # (and its messages: "within timeout (30m)") count from there
        elapsed = max(0.0, time.time() - self.queued_since) if self.queued_since else 0.0
        timeout = self.deadline - (self.queued_since or time.time()) if self.deadline else None
        progress = Progress(ref.name, time.monotonic() - elapsed, queue_timeout=self.queue_timeout, timeout=timeout)
        cursor = LogCursor()
        notifications = Notifications.from_dict(self.notify)
        loop = asyncio.get_running_loop()
        updates: asyncio.Queue = asyncio.Queue()
        follower = runner.follow(ref)

        def on_status(status: JobStatus, pods: list[dict]) -> None:  # in the follower's thread
            loop.call_soon_threadsafe(updates.put_nowait, (status, pods))

        await asyncio.to_thread(follower.start, on_status)
        self.log.info("waiting on job %s in %s (shared watch; logs at each state change)", ref.name, ref.namespace)
        pods: list[dict] = []
        last_start_check = 0.0
        try:
            while True:
                now = time.monotonic()
                changed = False
                quiet = START_CHECK_EVERY if progress.starting(now, after=0.0) else 60.0
                try:
                    status, pods = await asyncio.wait_for(updates.get(), progress.next_wakeup(now, quiet))
                    batch = [(status, pods)]
                    while not updates.empty():
                        batch.append(updates.get_nowait())
                    now = time.monotonic()
                    for status, pods in batch:  # noqa: B007 - the newest pods are used below
                        previous = progress.last
                        for line in progress.update(status, now):
                            self.log.info("%s", line)
                            changed = True
                        if notifications is not None:
                            await asyncio.to_thread(notifications.on_change, previous, status)
                except TimeoutError:
                    if beat := progress.heartbeat(now):
                        self.log.info("%s", beat)
                        changed = True  # a long quiet wait: show the job's latest logs and Events too
                if progress.starting(now) and now - last_start_check >= START_CHECK_EVERY:
                    last_start_check = now
                    why = await asyncio.to_thread(why_not_started, runner, ref, self.log)
                    for line in progress.cannot_start(why, now):
                        self.log.warning("%s", line)
                verdict = progress.verdict(now)
                if self.stream_logs and (changed or verdict):
                    await asyncio.to_thread(cursor.emit, runner, ref, self.log, pods or None)
                if verdict is None:
                    continue
                # The triggerer cannot reach the task state store (Airflow 3.3): the worker
                # records the job when it defers, and the result when it resumes.
                outcome = await asyncio.to_thread(finish, runner, ref, verdict, pods, on_finish=OnFinish(self.on_finish),
                                                  log=self.log, owner=self.try_number is not None)
                if notifications is not None:
                    await asyncio.to_thread(notifications.final, outcome.ok, verdict.status, outcome.error)
                yield self._event(JobEvent(ref, outcome.ok, outcome.result, outcome.error))
                return
        finally:
            await asyncio.to_thread(follower.close)

    async def _mask_secrets(self, runner: JobRunner) -> None:
        """The job's secret values, registered with the secrets masker of the triggerer (another
        process than the task's) before any of the job's logs are copied here."""
        from dlc_airflow.secrets import TriggerSecrets

        if self.secrets:
            await asyncio.to_thread(TriggerSecrets.from_dict(self.secrets).register, runner, self.log)

    def _event(self, event: JobEvent) -> TriggerEvent:
        if self.end_from_trigger:
            end = TaskSuccessEvent if event.ok else TaskFailedEvent
            return end(xcoms={"return_value": event.result})
        return TriggerEvent(event.to_dict())

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop its job (not on triggerer restarts), unless
        a newer try of the task has adopted it."""
        from dlc_airflow.submission import stop_if_owner

        ref = JobRef.from_dict(self.ref)
        if self.try_number is None:  # a sensor's wait: the job is not this task's to stop
            self.log.info("task killed while deferred; job %s is not its own and keeps running", ref.name)
            return
        runner = await self._runner()
        self.log.info("task killed while deferred")
        await asyncio.to_thread(stop_if_owner, runner, ref, self.try_number, self.log)


async def _connection(conn_id: str) -> Any | None:
    """The Airflow connection, read without blocking the triggerer's loop (None if none)."""
    from airflow.sdk.bases.hook import BaseHook

    try:
        return await BaseHook.aget_connection(conn_id)
    except Exception:  # noqa: BLE001 - kubernetes_default may not exist: default config
        return None
