"""Waiting on a job: the I/O of a wait's turn, and the in-process loop (worker, sensor).

`Progress.step` (dlc_airflow.progress) decides each turn; `WaitIO.turn` does what it asks,
for the worker's loop below and the triggerer's (trigger.py) alike: log its lines, tell
the notifiers, ask the backend's events why a job cannot start, and copy the job's logs and
events into the task log, each line prefixed with its replica (`[worker-1] ...`), and log the
job's progress and ETA when they change (`Progress.observe` over the lines just copied), and
when a running replica becomes unwell or is no longer (`replica_health`).
The two loops differ only in how statuses arrive (a thread's condition, an asyncio queue).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dlc_airflow.jobref import JobRef
from dlc_airflow.progress import Progress, Verdict, replica_health
from dlc_airflow.runner import (
    Event,
    EventSource,
    JobRunner,
    Log,
    LogLine,
    LogPositions,
    QueueSource,
    Replica,
    replica_order,
)
from dlc_airflow.status import JobStatus

LOG_EVERY = 2.0  # seconds between log fetches while a job runs (a worker's wait)
# Logs of at most this many replicas go to the task log (rank 0 first; failed pods always):
# 64 interleaved worker logs help nobody and cost a request each.
LOG_REPLICAS = 4


@dataclass
class LogCursor:
    """Where the task log is in the job's logs and events."""

    positions: LogPositions = field(default_factory=dict)
    seen_events: set[str] = field(default_factory=set)

    def emit(self, runner: JobRunner, ref: JobRef, log: Log, replicas: Sequence[Replica] | None,
             events: bool = True) -> list[LogLine]:
        """Log new log lines and events (where the backend keeps events); returns the log lines."""
        try:
            lines, self.positions = runner.logs(ref, self.positions, replicas=log_replicas(replicas))
        except Exception as exc:  # noqa: BLE001 - logs are best effort; the wait goes on
            log.debug("could not read logs of %s: %s", ref.name, exc)
            lines = []
        for replica, line in lines:
            log.info("[%s] %s", replica, line)
        if events and isinstance(runner, EventSource):
            try:
                new = runner.events(ref, self.seen_events)
            except Exception as exc:  # noqa: BLE001
                log.debug("could not read events of %s: %s", ref.name, exc)
                new = []
            for event in sorted(new, key=lambda e: e.time):
                self.seen_events.add(event.uid)
                log.log(logging.WARNING if event.warning else logging.INFO, "[event] %s", describe_event(event))
        return lines


def why_not_started(runner: JobRunner, ref: JobRef, log: Log) -> str:
    """Why the job's replicas cannot be created, from the newest event that says so ('' if none,
    or where the backend keeps no events)."""
    if not isinstance(runner, EventSource):
        return ""
    try:
        found = [e for e in runner.events(ref) if e.blocks_start]
    except Exception as exc:  # noqa: BLE001 - the wait goes on; the timeouts still apply
        log.debug("could not read events of %s: %s", ref.name, exc)
        return ""
    newest = max(found, key=lambda e: e.time, default=None)
    return f"{newest.object}: {newest.message}" if newest is not None else ""


def where_queued(runner: JobRunner, ref: JobRef, log: Log) -> str:
    """Where the queued job stands in its queue ('' where the backend cannot say)."""
    if not isinstance(runner, QueueSource):
        return ""
    try:
        return runner.queue_position(ref)
    except Exception as exc:  # noqa: BLE001 - the wait goes on without it
        log.debug("could not read the queue position of %s: %s", ref.name, exc)
        return ""


def log_replicas(replicas: Sequence[Replica] | None) -> Sequence[Replica] | None:
    """The replicas whose logs are streamed: the first LOG_REPLICAS in rank order, and failed ones."""
    if not replicas:
        return replicas
    ranked = sorted(replicas, key=replica_order)
    failed = [r for r in ranked[LOG_REPLICAS:] if r.state == "Failed"]
    return ranked[:LOG_REPLICAS] + failed


def ended_replicas(runner: JobRunner, ref: JobRef, followed: Sequence[Replica], log: Log) -> Sequence[Replica]:
    """The replicas read once more when the job has ended, for its last logs and outputs: the
    follower's report can lag the job's own status (a rank that ran seen still Pending, its lines
    and message never read). One that is gone by now (a controller deletes the pods still
    running when its job ends) is kept as the follower last saw it."""
    try:
        fresh = runner.replicas(ref)
    except Exception as exc:  # noqa: BLE001 - the follower's view is still good
        log.debug("could not read the replicas of %s again: %s", ref.name, exc)
        return followed
    named = {replica.name: replica for replica in followed}
    named.update((replica.name, replica) for replica in fresh)
    return list(named.values())


def describe_event(event: Event) -> str:
    return f"{event.object}: {event.reason}: {event.message}"


OnChange = Callable[[JobStatus | None, JobStatus], None]  # (previous status, new status)
Update = tuple[JobStatus, Sequence[Replica]]  # what a follower reports: the status and the job's replicas


@dataclass
class WaitIO:
    """The I/O of one wait: does what each Step of its Progress asks."""

    runner: JobRunner
    ref: JobRef
    log: Log
    progress: Progress
    on_change: OnChange | None = None
    cursor: LogCursor = field(default_factory=LogCursor)
    replicas: Sequence[Replica] = ()  # the newest the follower reported

    def turn(self, batch: list[Update], now: float) -> Verdict | None:
        """One turn with the updates that arrived since the last; the verdict when the wait is over."""
        for _, replicas in batch:
            unwell, recovered = replica_health(self.ref.name, self.replicas, replicas)
            for line in unwell:
                self.log.warning("%s", line)
            for line in recovered:
                self.log.info("%s", line)
            self.replicas = replicas
        why = position = None
        if self.progress.time_to_ask_why(now):
            why = why_not_started(self.runner, self.ref, self.log)
            position = where_queued(self.runner, self.ref, self.log)
        step = self.progress.step([status for status, _ in batch], now, why=why, position=position)
        for line in step.info:
            self.log.info("%s", line)
        for line in step.warnings:
            self.log.warning("%s", line)
        if self.on_change is not None:
            for change in step.changes:
                self.on_change(change.previous, change.status)
        if step.verdict is not None:
            self.replicas = ended_replicas(self.runner, self.ref, self.replicas, self.log)
        if step.read_logs:
            lines = self.cursor.emit(self.runner, self.ref, self.log, self.replicas or None, events=step.read_events)
            for line in self.progress.observe(lines, now):
                self.log.info("%s", line)
        return step.verdict


def wait_sync(runner: JobRunner, ref: JobRef, log: Log, *, queue_timeout: float | None,
              timeout: float | None, stream_logs: bool,
              on_change: OnChange | None = None) -> tuple[Verdict, Sequence[Replica]]:
    """Follow the job until a verdict; logs progress (and the job's logs) on the way, and tells
    `on_change` every status it sees (notifications)."""
    progress = Progress(ref.name, time.monotonic(), queue_timeout=queue_timeout, timeout=timeout,
                        stream_logs=stream_logs, log_every=LOG_EVERY)
    wait = WaitIO(runner, ref, log, progress, on_change)
    updates: list[Update] = []
    arrived = threading.Condition()

    def on_status(status: JobStatus, replicas: Sequence[Replica]) -> None:  # in the follower's thread
        with arrived:
            updates.append((status, replicas))
            arrived.notify()

    follower = runner.follow(ref)
    follower.start(on_status)
    try:
        while True:
            with arrived:
                if not updates:
                    arrived.wait(progress.wakeup(time.monotonic()))
                batch, updates[:] = list(updates), []
            if verdict := wait.turn(batch, time.monotonic()):
                return verdict, wait.replicas
    finally:
        follower.close()
